package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// udpReadBuffer is the receive queue asked for each UDP socket. The
// kernel's default (208 KiB, a few hundred small datagrams) holds about a
// tenth of a second of queries at 2,000 a second: a reader that stalls
// longer (a CPU-starved process, a pause for garbage collection) lost the
// rest. 1 MiB, which the kernel doubles for its bookkeeping, holds about
// a second's worth; memory is taken only by what is queued.
const udpReadBuffer = 1 << 20

// listenAddr opens n UDP sockets sharing addr through SO_REUSEPORT (the
// kernel hashes clients over them, so n readers never contend for one
// socket's read lock) and a TCP listener on the same port, also with
// SO_REUSEPORT, so a new agent can join them (takeover) and the old one
// hand its traffic over (Drain). Port 0 picks a port free for both.
func listenAddr(addr string, n int, takeover bool) ([]*net.UDPConn, *net.TCPListener, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, nil, fmt.Errorf("listen %s: %w", addr, err)
	}
	tries := 1
	if port == "0" {
		tries = 10 // the UDP port picked may be taken for TCP
	}
	for {
		udp, tcp, err := listenOnce(addr, host, n, takeover)
		tries--
		if err == nil || tries == 0 || !errors.Is(err, syscall.EADDRINUSE) {
			return udp, tcp, err
		}
	}
}

func listenOnce(addr, host string, n int, takeover bool) ([]*net.UDPConn, *net.TCPListener, error) {
	lc := net.ListenConfig{Control: reusePort}
	ctx := context.Background()
	if !takeover {
		// With SO_REUSEPORT a second agent of the same user could bind the
		// same port and silently take half the queries. A plain bind
		// first makes a taken port fail loudly unless joining it is
		// what was asked for.
		probe, err := net.ListenPacket("udp", addr)
		if err != nil {
			return nil, nil, fmt.Errorf("listen udp %s: %w", addr, err)
		}
		addr = probe.LocalAddr().String()
		_ = probe.Close()
	}
	var conns []*net.UDPConn
	closeAll := func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}
	for i := range n {
		a := addr
		if i > 0 {
			a = conns[0].LocalAddr().String()
		}
		pc, err := lc.ListenPacket(ctx, "udp", a)
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("listen udp %s: %w", a, err)
		}
		conns = append(conns, pc.(*net.UDPConn))
		// Best effort: the kernel caps it at net.core.rmem_max, and a
		// smaller queue only drops (and counts) sooner.
		_ = conns[i].SetReadBuffer(udpReadBuffer)
	}
	_, port, _ := net.SplitHostPort(conns[0].LocalAddr().String())
	taddr := net.JoinHostPort(host, port)
	l, err := lc.Listen(ctx, "tcp", taddr)
	if err != nil {
		closeAll()
		return nil, nil, fmt.Errorf("listen tcp %s: %w", taddr, err)
	}
	return conns, l.(*net.TCPListener), nil
}

func reusePort(_, _ string, c syscall.RawConn) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
	})
	if err != nil {
		return err
	}
	return serr
}
