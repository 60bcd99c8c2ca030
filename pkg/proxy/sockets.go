package proxy

import (
	"errors"
	"fmt"
	"net"
	"os"

	"golang.org/x/sys/unix"

	"github.com/meshdns/meshdns/pkg/proxy/upstream"
)

// Sockets are the DNS sockets of a Server. A supervisor binds them with
// ListenSockets and hands them to each agent process it starts (Files,
// then SocketsFromFiles in the child, Config.Inherited): the sockets then
// outlive an agent that crashes, so queries sent while it restarts wait in
// the socket's queue for the next one instead of being refused or lost.
type Sockets struct {
	UDP []*net.UDPConn
	TCP []*net.TCPListener
}

// ListenSockets binds n UDP sockets (SO_REUSEPORT) and a TCP listener on
// each address, as a Server does.
func ListenSockets(addrs []string, n int) (*Sockets, error) {
	s := &Sockets{}
	for _, a := range addrs {
		udp, tcp, err := listenAddr(a, max(n, 1), false)
		if err != nil {
			s.Close()
			return nil, err
		}
		s.UDP = append(s.UDP, udp...)
		s.TCP = append(s.TCP, tcp)
	}
	return s, nil
}

// Files returns a duplicate of every socket, UDP ones first, for a child
// process's ExtraFiles. The caller closes them.
func (s *Sockets) Files() ([]*os.File, error) {
	var out []*os.File
	add := func(f *os.File, err error) error {
		if err != nil {
			for _, f := range out {
				f.Close()
			}
			return fmt.Errorf("socket file: %w", err)
		}
		out = append(out, f)
		return nil
	}
	for _, c := range s.UDP {
		if err := add(c.File()); err != nil {
			return nil, err
		}
	}
	for _, l := range s.TCP {
		if err := add(l.File()); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// SocketsFromFiles turns inherited socket files back into sockets, telling
// UDP from TCP by the socket type. The files are closed (the sockets hold
// their own descriptors).
func SocketsFromFiles(files []*os.File) (*Sockets, error) {
	s := &Sockets{}
	for _, f := range files {
		typ, err := unix.GetsockoptInt(int(f.Fd()), unix.SOL_SOCKET, unix.SO_TYPE)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("inherited fd %d: %w", f.Fd(), err)
		}
		switch typ {
		case unix.SOCK_DGRAM:
			pc, err := net.FilePacketConn(f)
			if err != nil {
				s.Close()
				return nil, fmt.Errorf("inherited fd %d: %w", f.Fd(), err)
			}
			s.UDP = append(s.UDP, pc.(*net.UDPConn))
		case unix.SOCK_STREAM:
			l, err := net.FileListener(f)
			if err != nil {
				s.Close()
				return nil, fmt.Errorf("inherited fd %d: %w", f.Fd(), err)
			}
			s.TCP = append(s.TCP, l.(*net.TCPListener))
		default:
			s.Close()
			return nil, fmt.Errorf("inherited fd %d: socket type %d is neither UDP nor TCP", f.Fd(), typ)
		}
		f.Close()
	}
	if len(s.UDP) == 0 {
		s.Close()
		return nil, errors.New("inherited sockets: no UDP socket")
	}
	return s, nil
}

// Close closes every socket.
func (s *Sockets) Close() error {
	var errs []error
	for _, c := range s.UDP {
		errs = append(errs, c.Close())
	}
	for _, l := range s.TCP {
		errs = append(errs, l.Close())
	}
	return errors.Join(errs...)
}

// addrPort returns the address and port of a UDP or TCP address, zero for
// any other.
var addrPort = upstream.AddrPort
