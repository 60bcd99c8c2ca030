//go:build !linux

package observe

import "net"

// SocketDrops: the kernel's drop count per socket is read on Linux only.
func SocketDrops(*net.UDPConn) (uint32, bool) { return 0, false }
