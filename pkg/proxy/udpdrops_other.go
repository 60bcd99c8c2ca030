//go:build !linux

package proxy

import "net"

// socketDrops: the kernel's drop count per socket is read on Linux only.
func socketDrops(*net.UDPConn) (uint32, bool) { return 0, false }
