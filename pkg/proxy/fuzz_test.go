package proxy

import (
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"testing"

	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/internal/dnswire"
	"github.com/meshdns/meshdns/pkg/policy"
)

// FuzzHandler feeds arbitrary packets to the handler over both protocols:
// it must not panic, and every reply must be a DNS response to the
// packet's ID that miekg can unpack and that fits the client's UDP size.
func FuzzHandler(f *testing.F) {
	pack := func(m *dns.Msg) []byte {
		b, err := m.Pack()
		if err != nil {
			f.Fatal(err)
		}
		return b
	}
	valid := pack(newQuery("web.demo.svc.cluster.local.", dns.TypeA))
	hdr := valid[:12]
	with := func(tail ...byte) []byte { return append(append([]byte{}, hdr...), tail...) }

	// Well-formed queries on each path.
	f.Add(valid)
	f.Add(pack(newQuery("WEB.demo.svc.cluster.local.demo.svc.cluster.local.", dns.TypeA)))
	f.Add(pack(newQuery("nope.demo.svc.cluster.local.", dns.TypeA)))
	f.Add(pack(newQuery("big.demo.svc.cluster.local.", dns.TypeAAAA)))
	f.Add(pack(newQuery("db.demo.svc.cluster.local.", dns.TypeA)))
	f.Add(pack(newQuery("www.example.org.", dns.TypeA)))
	edns := newQuery("web.demo.svc.cluster.local.", dns.TypeA)
	edns.SetEdns0(4096, true)
	f.Add(pack(edns))
	edns.IsEdns0().SetVersion(3)
	f.Add(pack(edns))
	// Malformed names: a compression loop, a pointer past the end, a
	// pointer to itself inside the header, a reserved label type, a name
	// over 255 bytes, a label running past the end.
	f.Add(with(0xc0, 12, 0, 1, 0, 1))
	f.Add(with(0xc0, 0xff, 0, 1, 0, 1))
	f.Add(with(0xc0, 2, 0, 1, 0, 1))
	f.Add(with(0x80, 1, 'a', 0, 0, 1, 0, 1))
	f.Add(longName(hdr))
	f.Add(with(10, 'a', 'b'))
	// Header games: QR set, short header, opcodes, counts that lie.
	f.Add(withARCount(valid, 1))
	f.Add(append(withARCount(valid, 1), 0, 0, 41, 0x10, 0, 0, 0, 0, 0, 0xff, 0xff))
	f.Add([]byte{0, 1, 0x80})
	f.Add(func() []byte { b := append([]byte{}, valid...); b[2] |= 0x28; return b }())
	f.Add(func() []byte { b := append([]byte{}, valid...); b[5] = 0; return b }())
	f.Add(func() []byte { b := append([]byte{}, valid...); b[7] = 3; return b }())

	cfg := testConfig(&fakeResolver{answer: staticAnswer(f, "A 192.0.2.1", "AAAA 2001:db8::1")})
	// The query log on for every answer, so each packet also goes
	// through its line (names printed from whatever the parser kept).
	cfg.QueryLog = QueryLogConfig{Classes: LogAll}
	cfg.QueryLogger = slog.New(slog.NewJSONHandler(io.Discard, nil))
	h, err := NewHandler(cfg)
	if err != nil {
		f.Fatal(err)
	}
	h.SetTable(demoTable(f))
	// The same under a DNS policy (policy_test.go), judged on the way.
	cfg.Search = podSearch
	cfg.Registry = newTestRegistry()
	hp, err := NewHandler(cfg)
	if err != nil {
		f.Fatal(err)
	}
	hp.SetTablePolicy(demoTable(f), stripePolicy(f, policy.Enforce, policy.Refused))
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, pkt []byte) {
		for i, p := range []Protocol{UDP, TCP, UDP, TCP} {
			h := h
			if i > 1 {
				h = hp
			}
			reply := h.Serve(ctx, make([]byte, 0, 512), pkt, p)
			if reply == nil {
				continue
			}
			if len(pkt) < dnswire.HeaderLen || pkt[2]&0x80 != 0 {
				t.Fatalf("%s: reply to a packet that should be dropped: %x", p, pkt)
			}
			if binary.BigEndian.Uint16(reply) != binary.BigEndian.Uint16(pkt) || reply[2]&0x80 == 0 {
				t.Fatalf("%s: reply %x is not a response to %x", p, reply, pkt)
			}
			m := new(dns.Msg)
			if err := m.Unpack(reply); err != nil {
				t.Fatalf("%s: reply does not unpack: %v\nquery %x\nreply %x", p, err, pkt, reply)
			}
			if p == UDP {
				limit := dnswire.MinUDPSize
				if opt := m.IsEdns0(); opt != nil {
					var q dnswire.Query
					if dnswire.ParseQuery(pkt, &q) == dnswire.ParseOK {
						limit = q.UDPSize
					}
				}
				if len(reply) > limit {
					t.Fatalf("udp reply of %d bytes exceeds %d", len(reply), limit)
				}
			}
		}
	})
}
