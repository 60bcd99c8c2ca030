//go:build !linux

package proxy

import (
	"context"
	"net"
	"net/netip"
	"sync"
)

// serveUDP reads queries from c until it is closed (serveUDPConn; Linux
// reads and writes with system calls of its own, udp_linux.go).
func (s *Server) serveUDP(ctx context.Context, wg *sync.WaitGroup, c *net.UDPConn) {
	s.serveUDPConn(ctx, wg, c)
}

// sendReply sends a forwarding worker's reply (writeUDP; Linux calls
// sendto directly, udp_linux.go).
func (s *Server) sendReply(c *net.UDPConn, reply []byte, addr netip.AddrPort) {
	s.writeUDP(c, reply, addr)
}
