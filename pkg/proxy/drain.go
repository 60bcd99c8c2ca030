package proxy

import (
	"context"
	"net"
	"net/netip"
	"time"

	"golang.org/x/sys/unix"
)

// drainIdle is how long a draining UDP reader waits for its queue: after
// the divert nothing new arrives, and what is queued is read in
// microseconds.
const drainIdle = 100 * time.Millisecond

// Drain stops taking new queries without losing one already taken, so a
// process that joined the sockets (Config.Takeover) takes the traffic
// over with no query lost; without one, new queries are refused by the
// kernel at once (ICMP port unreachable, a connection refused), which a
// client sees fail fast rather than time out.
//
//   - Each UDP socket is connected to its own address. The kernel then
//     gives it no more datagrams from clients (a connected socket only
//     matches its peer) and sends each new one to the other sockets of the
//     SO_REUSEPORT group, those of the new process. Datagrams already
//     queued stay readable; the readers answer them until the queue stays
//     empty for drainIdle, and replies still go out from the socket's
//     address.
//   - TCP listeners are closed (the new process's listeners in the group
//     take new connections); open connections answer what they read and
//     close.
//   - Queries waiting for an upstream are answered.
//
// Drain returns once all that is done, or with ctx's error when ctx ends
// first. Run calls it when Config.DrainTimeout is set.
func (s *Server) Drain(ctx context.Context) error {
	s.mu.Lock()
	udp, tcp := s.udp, s.tcp
	s.draining.Store(true)
	s.mu.Unlock()
	for _, c := range udp {
		if err := divert(c); err != nil {
			s.log.Warn("drain: divert udp socket", "addr", c.LocalAddr().String(), "err", err)
		}
		_ = c.SetReadDeadline(time.Now().Add(drainIdle))
	}
	for _, l := range tcp {
		_ = l.Close()
	}
	s.tcpConns.stopReading()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for s.readers.Load() > 0 || s.pending.Load() > 0 || s.tcpConns.len() > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	return nil
}

// divert connects c to its own address (a loopback one when it is bound
// to all addresses), which takes it out of the kernel's choice for
// datagrams from clients; its queue and its sends are unaffected.
func divert(c *net.UDPConn) error {
	local := c.LocalAddr().(*net.UDPAddr).AddrPort()
	ip := local.Addr().Unmap()
	if ip.IsUnspecified() {
		is4 := ip.Is4()
		ip = netip.IPv6Loopback()
		if is4 {
			ip = netip.AddrFrom4([4]byte{127, 0, 0, 1})
		}
	}
	var sa unix.Sockaddr
	if ip.Is4() {
		sa = &unix.SockaddrInet4{Port: int(local.Port()), Addr: ip.As4()}
	} else {
		sa = &unix.SockaddrInet6{Port: int(local.Port()), Addr: ip.As16()}
	}
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var cerr error
	if err := rc.Control(func(fd uintptr) { cerr = unix.Connect(int(fd), sa) }); err != nil {
		return err
	}
	return cerr
}
