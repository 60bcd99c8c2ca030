package proxy

import (
	"context"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/meshdns/meshdns/pkg/proxy/observe"
)

// udpBurst bounds the datagrams one wake-up of a reader answers before it
// goes back through the net package, which checks for a closed socket and
// an expired read deadline (drain.go): Close waits for the reader to
// return, so under a steady stream it must return now and then.
const udpBurst = 64

// udpReader is one UDP reader's state, on the heap so the system calls'
// pointers into it stay valid.
type udpReader struct {
	s   *Server
	ctx context.Context
	wg  *sync.WaitGroup
	c   *net.UDPConn
	buf []byte // a query of any size is read whole
	out []byte
	q   query
	// sa is the sender of the datagram read last, salen its length.
	sa    unix.RawSockaddrInet6
	salen uint32
	err   error
}

// serveUDP reads queries from c until it is closed. Table answers and
// Resolver cache hits are written from this goroutine, without handing
// over: that is the path whose CPU per query is held next to a plain UDP
// reflector. Requests that must wait (upstream, ExternalName) go, parsed,
// to workers so a slow upstream never delays a table answer.
//
// Each wake-up reads and answers what is queued with recvfrom and sendto
// called directly (the socket is non-blocking, so they never block), up
// to udpBurst datagrams, inside one RawConn.Read. ReadFromUDPAddrPort and
// WriteToUDPAddrPort lock the descriptor, arm the poller and tell the
// scheduler about the system call on every datagram: about a tenth of
// the agent's CPU per table answer under dnsperf, more than the handler
// itself. A send the socket cannot take at once (its buffer full) goes
// through WriteToUDPAddrPort, which waits.
func (s *Server) serveUDP(ctx context.Context, wg *sync.WaitGroup, c *net.UDPConn) {
	rc, err := c.SyscallConn()
	if err != nil {
		s.serveUDPConn(ctx, wg, c)
		return
	}
	s.readers.Add(1)
	defer s.readers.Add(-1)
	u := &udpReader{s: s, ctx: ctx, wg: wg, c: c, buf: make([]byte, maxUDPPacket), out: make([]byte, 0, readerReplyBuf)}
	u.q.req.addrs.Server = addrPort(c.LocalAddr())
	read := u.burst // one closure for the reader's life
	for {
		err := rc.Read(read)
		if err == nil {
			err, u.err = u.err, nil
		}
		if err != nil && s.udpReadDone(ctx, err) {
			return
		}
	}
}

// burst answers up to udpBurst queued datagrams; false asks RawConn.Read
// to wait for the next one.
func (u *udpReader) burst(fd uintptr) bool {
	for range udpBurst {
		u.salen = uint32(unsafe.Sizeof(u.sa))
		n, _, errno := unix.RawSyscall6(unix.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&u.buf[0])), uintptr(len(u.buf)),
			0, uintptr(unsafe.Pointer(&u.sa)), uintptr(unsafe.Pointer(&u.salen)))
		switch errno {
		case 0:
		case unix.EAGAIN:
			return false
		case unix.EINTR:
			continue
		default:
			u.err = errno
			return true
		}
		addr := u.sender()
		reply := u.s.answerUDP(u.ctx, u.wg, u.c, addr, u.buf[:n], u.out, &u.q)
		if len(reply) == 0 {
			continue
		}
		_, _, errno = unix.RawSyscall6(unix.SYS_SENDTO, fd, uintptr(unsafe.Pointer(&reply[0])), uintptr(len(reply)),
			0, uintptr(unsafe.Pointer(&u.sa)), uintptr(u.salen))
		switch errno {
		case 0:
		case unix.EAGAIN, unix.EINTR:
			u.s.writeUDP(u.c, reply, addr)
		default:
			u.s.h.obs.Drop(UDP, observe.DropSendFailed)
			u.s.log.Debug("write udp", "err", errno)
		}
		u.out = keepGrown(u.out, reply)
	}
	return true
}

// sender returns the address in u.sa as ReadFromUDPAddrPort would: an
// IPv4 address from an AF_INET socket, 16 bytes (mapped or not) from an
// AF_INET6 one, with its zone as the interface index (the net package
// names it, when it knows the interface; either works to send to).
func (u *udpReader) sender() netip.AddrPort {
	p := (*[2]byte)(unsafe.Pointer(&u.sa.Port)) // network byte order
	port := uint16(p[0])<<8 | uint16(p[1])
	switch u.sa.Family {
	case unix.AF_INET:
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(&u.sa))
		return netip.AddrPortFrom(netip.AddrFrom4(sa4.Addr), port)
	case unix.AF_INET6:
		ip := netip.AddrFrom16(u.sa.Addr)
		if u.sa.Scope_id != 0 {
			ip = ip.WithZone(strconv.FormatUint(uint64(u.sa.Scope_id), 10))
		}
		return netip.AddrPortFrom(ip, port)
	}
	return netip.AddrPort{}
}

// sendReply sends a forwarding worker's reply with sendto called directly,
// as the readers send theirs. Through WriteToUDPAddrPort the call enters
// the scheduler's system call state, which wakes the runtime's monitor
// thread whenever it sleeps because the process was idle: on one core,
// after every forwarded query (pkg/proxy/upstream udpsock_linux.go says
// more). A reply the socket cannot take at once goes through writeUDP,
// which waits.
func (s *Server) sendReply(c *net.UDPConn, reply []byte, addr netip.AddrPort) {
	var sa unix.RawSockaddrInet6 // or an IPv4 one in its first bytes
	salen, ok := sockaddr(&sa, addr)
	rc, err := c.SyscallConn()
	if !ok || err != nil || len(reply) == 0 {
		s.writeUDP(c, reply, addr)
		return
	}
	var errno unix.Errno
	err = rc.Control(func(fd uintptr) {
		_, _, errno = unix.RawSyscall6(unix.SYS_SENDTO, fd, uintptr(unsafe.Pointer(&reply[0])), uintptr(len(reply)),
			0, uintptr(unsafe.Pointer(&sa)), uintptr(salen))
	})
	switch {
	case err != nil || errno == unix.EAGAIN || errno == unix.EINTR:
		s.writeUDP(c, reply, addr)
	case errno != 0:
		s.h.obs.Drop(UDP, observe.DropSendFailed)
		s.log.Debug("write udp", "err", errno)
	}
}

// sockaddr writes addr into sa as the reader's recvfrom gave it (sender):
// an IPv4 address as AF_INET, any other as AF_INET6 with a numeric zone
// as its scope. It reports the length, or false for a zone by name.
func sockaddr(sa *unix.RawSockaddrInet6, addr netip.AddrPort) (uint32, bool) {
	p := (*[2]byte)(unsafe.Pointer(&sa.Port))
	p[0], p[1] = byte(addr.Port()>>8), byte(addr.Port())
	if a := addr.Addr(); a.Is4() {
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		sa4.Family, sa4.Addr = unix.AF_INET, a.As4()
		return uint32(unsafe.Sizeof(*sa4)), true
	}
	sa.Family, sa.Addr = unix.AF_INET6, addr.Addr().As16()
	if z := addr.Addr().Zone(); z != "" {
		id, err := strconv.ParseUint(z, 10, 32)
		if err != nil {
			return 0, false
		}
		sa.Scope_id = uint32(id)
	}
	return uint32(unsafe.Sizeof(*sa)), true
}
