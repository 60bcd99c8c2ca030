package upstream

import (
	"net"
	"net/netip"
	"os"
	"syscall"
	"time"
	"unsafe"
)

// dialUDP opens a non-blocking UDP socket connected to ip, whose socket,
// connect, writes and reads are raw system calls waiting on the runtime's
// poller, as the proxy's readers do. Through the net package, each of
// setsockopt, connect, write, read and close enters the scheduler's
// system call state, which wakes the runtime's monitor thread (sysmon)
// whenever it sleeps because the process was idle: on the one core a
// sidecar usually gets, that thread then takes the core from the
// forwarded query several times over, and it set the tail of a mix of
// table answers and forwarded queries at a steady rate (hack/benchdns
// -mixed). Only Close still goes through that path. An address with a
// zone goes through the net package.
func dialUDP(ip netip.AddrPort) (net.Conn, error) {
	if ip.Addr().Zone() != "" {
		return net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(ip))
	}
	a := ip.Addr().Unmap()
	var (
		sa4    syscall.RawSockaddrInet4
		sa6    syscall.RawSockaddrInet6
		sa     unsafe.Pointer
		salen  uintptr
		family = syscall.AF_INET
	)
	port := (*[2]byte)(unsafe.Pointer(&sa4.Port)) // network byte order
	if a.Is4() {
		sa4.Family, sa4.Addr = syscall.AF_INET, a.As4()
		sa, salen = unsafe.Pointer(&sa4), unsafe.Sizeof(sa4)
	} else {
		family = syscall.AF_INET6
		sa6.Family, sa6.Addr = syscall.AF_INET6, a.As16()
		port = (*[2]byte)(unsafe.Pointer(&sa6.Port))
		sa, salen = unsafe.Pointer(&sa6), unsafe.Sizeof(sa6)
	}
	port[0], port[1] = byte(ip.Port()>>8), byte(ip.Port())
	fd, _, errno := syscall.RawSyscall(syscall.SYS_SOCKET, uintptr(family), syscall.SOCK_DGRAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
	if errno != 0 {
		return nil, os.NewSyscallError("socket", errno)
	}
	// Connecting a UDP socket binds a random port and never waits.
	if _, _, errno := syscall.RawSyscall(syscall.SYS_CONNECT, fd, uintptr(sa), salen); errno != 0 {
		_, _, _ = syscall.RawSyscall(syscall.SYS_CLOSE, fd, 0, 0)
		return nil, os.NewSyscallError("connect", errno)
	}
	// A non-blocking descriptor: os.NewFile registers it with the poller.
	f := os.NewFile(fd, "udp")
	rc, err := f.SyscallConn()
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	c := &rawUDP{f: f, rc: rc, remote: ip}
	c.step = c.syscall
	return c, nil
}

// rawUDP is a connected UDP socket read and written with raw system calls
// (dialUDP).
type rawUDP struct {
	f      *os.File
	rc     syscall.RawConn
	remote netip.AddrPort
	// step is syscall, made once per socket: a closure per read and
	// write was two allocations per forwarded query. trap and buf are
	// its call, n and errno its result. A socket is read and written by
	// one try at a time.
	step  func(fd uintptr) bool
	trap  uintptr
	buf   []byte
	n     uintptr
	errno syscall.Errno
}

var _ net.Conn = (*rawUDP)(nil)

// io runs the system call trap on b until it does not ask to wait.
func (c *rawUDP) io(wait func(func(uintptr) bool) error, trap uintptr, b []byte, op string) (int, error) {
	c.trap, c.buf = trap, b
	err := wait(c.step)
	c.buf = nil
	if err != nil {
		return 0, err
	}
	if c.errno != 0 {
		return 0, os.NewSyscallError(op, c.errno)
	}
	return int(c.n), nil
}

// syscall runs c.trap on c.buf, again when interrupted, and reports
// whether it is done (not EAGAIN: the poller waits for the socket then).
func (c *rawUDP) syscall(fd uintptr) bool {
	var p unsafe.Pointer
	if len(c.buf) > 0 {
		p = unsafe.Pointer(&c.buf[0])
	}
	for {
		c.n, _, c.errno = syscall.RawSyscall(c.trap, fd, uintptr(p), uintptr(len(c.buf)))
		if c.errno != syscall.EINTR {
			return c.errno != syscall.EAGAIN
		}
	}
}

// Read reads one datagram, waiting for it on the poller until the read
// deadline.
func (c *rawUDP) Read(b []byte) (int, error) { return c.io(c.rc.Read, syscall.SYS_READ, b, "read") }

// Write sends b as one datagram.
func (c *rawUDP) Write(b []byte) (int, error) { return c.io(c.rc.Write, syscall.SYS_WRITE, b, "write") }

// Close closes the socket.
func (c *rawUDP) Close() error { return c.f.Close() }

// LocalAddr returns the socket's address (dnstap records it); nil when the
// system does not say.
func (c *rawUDP) LocalAddr() net.Addr {
	var sa syscall.RawSockaddrInet6 // holds an IPv4 address too
	salen := uint32(unsafe.Sizeof(sa))
	var errno syscall.Errno
	err := c.rc.Control(func(fd uintptr) {
		_, _, errno = syscall.RawSyscall(syscall.SYS_GETSOCKNAME, fd, uintptr(unsafe.Pointer(&sa)), uintptr(unsafe.Pointer(&salen)))
	})
	if err != nil || errno != 0 {
		return nil
	}
	port := (*[2]byte)(unsafe.Pointer(&sa.Port))
	p := uint16(port[0])<<8 | uint16(port[1])
	if sa.Family == syscall.AF_INET {
		sa4 := (*syscall.RawSockaddrInet4)(unsafe.Pointer(&sa))
		return net.UDPAddrFromAddrPort(netip.AddrPortFrom(netip.AddrFrom4(sa4.Addr), p))
	}
	return net.UDPAddrFromAddrPort(netip.AddrPortFrom(netip.AddrFrom16(sa.Addr), p))
}

// RemoteAddr returns the upstream's address.
func (c *rawUDP) RemoteAddr() net.Addr { return net.UDPAddrFromAddrPort(c.remote) }

// SetDeadline sets the read and write deadlines.
func (c *rawUDP) SetDeadline(t time.Time) error { return c.f.SetDeadline(t) }

// SetReadDeadline sets the read deadline.
func (c *rawUDP) SetReadDeadline(t time.Time) error { return c.f.SetReadDeadline(t) }

// SetWriteDeadline sets the write deadline.
func (c *rawUDP) SetWriteDeadline(t time.Time) error { return c.f.SetWriteDeadline(t) }
