//go:build !linux

package upstream

import (
	"net"
	"net/netip"
)

// dialUDP opens a UDP socket connected to ip. Linux has one read and
// written with raw system calls (udpsock_linux.go); elsewhere it is the
// net package's.
func dialUDP(ip netip.AddrPort) (net.Conn, error) {
	return net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(ip))
}
