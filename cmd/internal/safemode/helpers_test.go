package safemode

import (
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/internal/namewire"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

// upstream is a real DNS server on 127.0.0.1, UDP and TCP on one port,
// answering every A question with 192.0.2.1.
type upstream struct {
	addr    string
	queries atomic.Int64
}

func newUpstream(t testing.TB) *upstream {
	t.Helper()
	u := &upstream{}
	u.addr = testenv.ServeDNS(t, testenv.AnswerA("192.0.2.1", 30, &u.queries))
	return u
}

// sockets binds a UDP socket and a TCP listener on one loopback port, as
// the supervisor does, and returns their files and the address.
func sockets(t testing.TB) ([]*os.File, string) {
	t.Helper()
	pc, l := testenv.ListenPair(t)
	uf, err := pc.(*net.UDPConn).File()
	if err != nil {
		t.Fatal(err)
	}
	tf, err := l.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	addr := pc.LocalAddr().String()
	pc.Close()
	l.Close()
	t.Cleanup(func() { uf.Close(); tf.Close() })
	return []*os.File{uf, tf}, addr
}

// ask sends one A question for name over proto and returns the reply.
func ask(t testing.TB, proto, addr, name string) (*dns.Msg, time.Duration) {
	t.Helper()
	m := new(dns.Msg).SetQuestion(dns.Fqdn(name), dns.TypeA)
	r, rtt, err := (&dns.Client{Net: proto, Timeout: 5 * time.Second}).Exchange(m, addr)
	if err != nil {
		t.Fatalf("%s %s: %v", proto, name, err)
	}
	return r, rtt
}

// writeState writes a state file as the agent's client persists it: the
// version and a full table of one name with settings s (none for nil).
func writeState(t testing.TB, dir string, s *namewire.AgentSettings) {
	t.Helper()
	table := namewire.AppendEntry(nil, "web.demo.svc.cluster.local", nil)
	table = namewire.AppendTableSettings(table, s)
	b := namewire.AppendFullResponse(nil, "v7", table)
	if err := os.WriteFile(filepath.Join(dir, StateFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
}
