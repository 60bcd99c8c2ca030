package testenv

import (
	"net"
	"testing"
)

// FreeAddr returns a 127.0.0.1 address whose port is free for both TCP and
// UDP right now, for a process the test starts later (a DNS server binds
// both) or starts again at the same address after a restart. Another
// process may take the port in between; tests on a shared machine accept
// that small race for not having to read the address back from the
// process.
func FreeAddr(t testing.TB) string {
	t.Helper()
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		pc, err := net.ListenPacket("udp", addr)
		if err != nil {
			continue
		}
		pc.Close()
		return addr
	}
	t.Fatal("no port free for both TCP and UDP on 127.0.0.1")
	return ""
}

// ListenPair binds a UDP socket and a TCP listener on one 127.0.0.1 port,
// as a DNS server holds them, trying other ports while the TCP one is
// taken. The caller closes both.
func ListenPair(t testing.TB) (net.PacketConn, net.Listener) {
	t.Helper()
	for range 20 {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		l, err := net.Listen("tcp", pc.LocalAddr().String())
		if err == nil {
			return pc, l
		}
		pc.Close()
	}
	t.Fatal("no loopback port free for both UDP and TCP")
	return nil, nil
}
