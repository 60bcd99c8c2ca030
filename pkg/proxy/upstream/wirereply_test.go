package upstream

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/miekg/dns"
)

// TestScanReply: which replies the wire path reads itself and which it
// leaves to miekg, and what it reads in them.
func TestScanReply(t *testing.T) {
	q := qwire(t, "www.example.com.", dns.TypeA)
	nameLen := len(q) - 4
	qEnd := 12 + len(q)
	pack := func(mutate func(m *dns.Msg)) []byte {
		m := new(dns.Msg)
		m.SetQuestion("www.example.com.", dns.TypeA)
		m.Id, m.Response, m.Compress = 0, true, true
		mutate(m)
		b, err := m.Pack()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	answer := func(m *dns.Msg) {
		m.Answer = []dns.RR{mustRR(t, "www.example.com. 60 IN CNAME edge.example.net."), mustRR(t, "edge.example.net. 20 IN A 192.0.2.1")}
	}
	for _, tc := range []struct {
		name      string
		reply     []byte
		wantOK    bool
		wantRcode int
		wantEDNS  bool
		wantTTL   uint32 // smallest TTL, when taken
		wantSpelt bool
	}{
		{name: "answer with OPT", reply: pack(func(m *dns.Msg) { answer(m); m.SetEdns0(1232, false) }),
			wantOK: true, wantEDNS: true, wantTTL: 20},
		{name: "owner spelt out", reply: func() []byte {
			m := new(dns.Msg)
			m.SetQuestion("www.example.com.", dns.TypeA)
			m.Id, m.Response = 0, true
			answer(m)
			b, _ := m.Pack()
			return b
		}(), wantOK: true, wantTTL: 20, wantSpelt: true},
		{name: "extended rcode", reply: pack(func(m *dns.Msg) { m.SetEdns0(1232, false); m.Rcode = dns.RcodeBadVers }),
			wantOK: true, wantRcode: dns.RcodeBadVers, wantEDNS: true, wantTTL: 0xFFFFFFFF},
		{name: "OPT not last", reply: pack(func(m *dns.Msg) {
			answer(m)
			m.SetEdns0(1232, false)
			m.Extra = append(m.Extra, mustRR(t, "edge.example.net. 20 IN AAAA 2001:db8::1"))
		})},
		{name: "OPT with an option", reply: pack(func(m *dns.Msg) {
			m.SetEdns0(1232, false)
			m.Extra[0].(*dns.OPT).Option = []dns.EDNS0{&dns.EDNS0_NSID{Code: dns.EDNS0NSID, Nsid: "6e73"}}
		})},
		{name: "TXT", reply: pack(func(m *dns.Msg) { m.Answer = []dns.RR{mustRR(t, `www.example.com. 60 IN TXT "x"`)} })},
		{name: "bytes after the last record", reply: append(pack(answer), 0)},
		{name: "pointer into a TTL", reply: func() []byte {
			b := pack(func(m *dns.Msg) {
				m.Answer = []dns.RR{mustRR(t, "www.example.com. 60 IN CNAME a.example.net."), mustRR(t, "b.example.net. 20 IN A 192.0.2.1")}
			})
			// The second owner is "b" and a pointer: aimed at the
			// first record's TTL field (after its owner, a pointer to
			// the question, its type and class) instead.
			i := bytes.Index(b, []byte("\x01b\xc0")) + 2
			binary.BigEndian.PutUint16(b[i:], 0xC000|uint16(qEnd+2+4))
			return b
		}()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if kind := checkReply(tc.reply, 0, q, nameLen); kind != "" {
				t.Fatalf("checkReply: %s", kind)
			}
			s, rcode, edns, ok := scanReply(tc.reply, q, nameLen)
			if ok != tc.wantOK {
				t.Fatalf("scanReply ok %v, want %v", ok, tc.wantOK)
			}
			if !ok {
				return
			}
			if rcode != tc.wantRcode || edns != tc.wantEDNS || s.minTTL != tc.wantTTL || s.spelt != tc.wantSpelt {
				t.Errorf("rcode %d edns %v minTTL %d spelt %v, want %d %v %d %v",
					rcode, edns, s.minTTL, s.spelt, tc.wantRcode, tc.wantEDNS, tc.wantTTL, tc.wantSpelt)
			}
		})
	}
}
