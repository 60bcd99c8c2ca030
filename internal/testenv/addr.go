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
