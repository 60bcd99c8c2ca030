package upstream

import (
	"context"
	"crypto/tls"
	"net/netip"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// resolveRecorded asks r about name A through AppendCached and Resolve,
// with a Probe that asks for the exchange when record, and returns what
// the Probe reports.
func resolveRecorded(t *testing.T, r *Resolver, name string, record bool) *Forwarded {
	t.Helper()
	q := qwire(t, name, dns.TypeA)
	var kb [maxQuestion]byte
	if _, err := lowerQuestion(&kb, q); err != nil {
		t.Fatal(err)
	}
	key := kb[:len(q)]
	var p Probe
	if _, _, hit := r.AppendCached(nil, q, key, &p); hit {
		return p.Forwarded()
	}
	if record {
		p.Record()
	}
	if _, _, err := r.Resolve(context.Background(), nil, q, key, &p); err != nil {
		t.Fatalf("Resolve %s: %v", name, err)
	}
	return p.Forwarded()
}

// checkForwarded checks that f is the exchange of a query for name sent
// to upstream over transport: the agent's socket, the times in order, and
// the reply answering the query as sent.
func checkForwarded(t *testing.T, f *Forwarded, transport Transport, upstream, name string, localKnown bool) {
	t.Helper()
	if f == nil {
		t.Fatal("no exchange recorded")
	}
	if f.Transport != transport || f.Upstream != netip.MustParseAddrPort(upstream) {
		t.Errorf("transport %d upstream %v, want %d %s", f.Transport, f.Upstream, transport, upstream)
	}
	if localKnown != (f.Local.Addr() == netip.MustParseAddr("127.0.0.1") && f.Local.Port() != 0) {
		t.Errorf("local %v (known: %v)", f.Local, localKnown)
	}
	if f.Sent.IsZero() || f.Received.Before(f.Sent) {
		t.Errorf("sent %v received %v", f.Sent, f.Received)
	}
	var qm, rm dns.Msg
	if err := qm.Unpack(f.Query); err != nil || qm.Response || len(qm.Question) != 1 || qm.Question[0].Name != name {
		t.Errorf("query %v: %v", &qm, err)
	}
	if err := rm.Unpack(f.Reply); err != nil || !rm.Response || rm.Id != qm.Id || len(rm.Answer) != 1 {
		t.Errorf("reply %v to query id %d: %v", &rm, qm.Id, err)
	}
}

// A Probe that asks gets the upstream exchange, over UDP and, for a
// truncated reply, over TCP; one that does not ask, a cache hit, and a
// query that joined another's exchange get none.
func TestForwardedRecorded(t *testing.T) {
	srv := newServer(t, func(w dns.ResponseWriter, req *dns.Msg) {
		m := addrReply(req)
		if w.LocalAddr().Network() == "udp" && req.Question[0].Name == "big.example." {
			m.Answer, m.Truncated = nil, true
		}
		_ = w.WriteMsg(m)
	})
	r, _ := newTestResolver(t, Config{Upstreams: []string{srv.Addr}})

	checkForwarded(t, resolveRecorded(t, r, "a.example.", true), TransportUDP, srv.Addr, "a.example.", true)
	if f := resolveRecorded(t, r, "a.example.", true); f != nil {
		t.Errorf("cache hit recorded %+v", f)
	}
	if f := resolveRecorded(t, r, "b.example.", false); f != nil {
		t.Errorf("recorded without Record: %+v", f)
	}
	f := resolveRecorded(t, r, "big.example.", true)
	checkForwarded(t, f, TransportTCP, srv.Addr, "big.example.", true)
}

// Over DNS over TLS the exchange names the upstream; the query carries the
// ID the pool wrote on the wire.
func TestForwardedRecordedDoT(t *testing.T) {
	srv := newDoTServer(t, echoDoT)
	r, _ := newTestResolver(t, Config{
		Upstreams: []string{"tls://" + srv.Addr + "@dns.test"},
		TLS:       &tls.Config{RootCAs: srv.Roots},
	})
	checkForwarded(t, resolveRecorded(t, r, "a.example.", true), TransportDoT, srv.Addr, "a.example.", false)
}

// Of two queries sharing one exchange, only the one that sent it reports
// it: a dnstap stream shows each upstream query once.
func TestForwardedCoalesced(t *testing.T) {
	release := make(chan struct{})
	srv := newServer(t, func(w dns.ResponseWriter, req *dns.Msg) {
		<-release
		_ = w.WriteMsg(addrReply(req))
	})
	r, _ := newTestResolver(t, Config{Upstreams: []string{srv.Addr}, Timeout: time.Minute})
	got := make(chan *Forwarded, 2)
	for range 2 {
		go func() { got <- resolveRecorded(t, r, "a.example.", true) }()
	}
	// Wait for the second caller to join the first's flight.
	for counter(t, &r.metrics.coalesced) < 1 {
		time.Sleep(time.Millisecond)
	}
	close(release)
	a, b := <-got, <-got
	if (a == nil) == (b == nil) {
		t.Errorf("exchanges reported %v and %v, want exactly one", a, b)
	}
}

// BenchmarkResolveMissRecorded is BenchmarkAppendReplyMiss through
// AppendCached and Resolve, with the Probe recording (record) or not: the
// cost of the dnstap forwarder frames' copies on a miss.
func BenchmarkResolveMissRecorded(b *testing.B) {
	srv := newServer(b, answerWith(b, 0, []string{"$QNAME 300 IN A 192.0.2.1"}, nil))
	r, _ := newTestResolver(b, Config{Upstreams: []string{srv.Addr}, CacheSize: -1})
	q := qwire(b, "www.example.com.", dns.TypeA)
	key := append([]byte(nil), q...)
	ctx := context.Background()
	buf := make([]byte, 0, 512)
	for _, record := range []bool{false, true} {
		b.Run(map[bool]string{false: "off", true: "recorded"}[record], func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var p Probe
				r.AppendCached(buf[:0], q, key, &p)
				if record {
					p.Record()
				}
				if _, _, err := r.Resolve(ctx, buf[:0], q, key, &p); err != nil || (p.Forwarded() != nil) != record {
					b.Fatalf("err %v, recorded %v", err, p.Forwarded() != nil)
				}
			}
		})
	}
}
