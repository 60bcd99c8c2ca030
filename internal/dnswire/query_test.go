package dnswire

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"
)

func newQuery(name string, qtype uint16) *dns.Msg {
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	return m
}

func packMsg(t testing.TB, m *dns.Msg) []byte {
	t.Helper()
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustRR(t testing.TB, s string) dns.RR {
	t.Helper()
	rr, err := dns.NewRR(s)
	if err != nil {
		t.Fatalf("NewRR(%q): %v", s, err)
	}
	return rr
}

func mustRRs(t testing.TB, ss ...string) []dns.RR {
	t.Helper()
	var out []dns.RR
	for _, s := range ss {
		out = append(out, mustRR(t, s))
	}
	return out
}

// lowerWire is domain lowercased in wire form.
func lowerWire(t testing.TB, domain string) []byte {
	t.Helper()
	buf := make([]byte, MaxNameLen)
	n, err := dns.PackDomainName(dns.Fqdn(strings.ToLower(domain)), buf, 0, nil, false)
	if err != nil {
		t.Fatalf("pack %q: %v", domain, err)
	}
	return buf[:n]
}

// wireName converts a wire-form name to presentation form.
func wireName(name []byte) string {
	s, _, err := dns.UnpackDomainName(name, 0)
	if err != nil {
		return "<bad name>"
	}
	return s
}

func withARCount(pkt []byte, n byte) []byte {
	out := append([]byte(nil), pkt...)
	out[11] = n
	return out
}

// longName is a header plus a question whose name has 5 labels of 63 bytes.
func longName(hdr []byte) []byte {
	out := append([]byte(nil), hdr...)
	for range 5 {
		out = append(out, 63)
		for range 63 {
			out = append(out, 'a')
		}
	}
	return append(out, 0, 0, 1, 0, 1)
}

func TestParseQuery(t *testing.T) {
	plain := packMsg(t, newQuery("Web.Demo.", dns.TypeAAAA))
	edns := newQuery("web.demo.", dns.TypeA)
	edns.SetEdns0(4096, true)
	small := newQuery("web.demo.", dns.TypeA)
	small.SetEdns0(100, false)
	type got struct {
		Status  ParseStatus
		Name    string
		Qtype   uint16
		EDNS    bool
		DO      bool
		UDPSize int
	}
	tests := []struct {
		name string
		pkt  []byte
		want got
	}{
		{name: "plain query", pkt: plain, want: got{Status: ParseOK, Name: "Web.Demo.", Qtype: dns.TypeAAAA, UDPSize: 512}},
		{name: "edns with do", pkt: packMsg(t, edns), want: got{Status: ParseOK, Name: "web.demo.", Qtype: dns.TypeA, EDNS: true, DO: true, UDPSize: 4096}},
		{name: "edns size below 512", pkt: packMsg(t, small), want: got{Status: ParseOK, Name: "web.demo.", Qtype: dns.TypeA, EDNS: true, UDPSize: 512}},
		{name: "short header", pkt: plain[:11], want: got{Status: ParseDrop, UDPSize: 0}},
		{name: "response", pkt: func() []byte { b := append([]byte{}, plain...); b[2] |= 0x80; return b }(), want: got{Status: ParseDrop, UDPSize: 512}},
		{name: "no question", pkt: func() []byte { b := append([]byte{}, plain...); b[5] = 0; return b }(), want: got{Status: ParseFormErr, UDPSize: 512}},
		{name: "cut name", pkt: plain[:15], want: got{Status: ParseFormErr, UDPSize: 512}},
		{name: "cut type", pkt: plain[:len(plain)-2], want: got{Status: ParseFormErr, UDPSize: 512}},
		{name: "compressed name", pkt: append(append([]byte{}, plain[:12]...), 0xc0, 12, 0, 1, 0, 1), want: got{Status: ParseSlow, UDPSize: 512}},
		{name: "answer records", pkt: func() []byte { b := append([]byte{}, plain...); b[7] = 1; return b }(), want: got{Status: ParseSlow, Name: "Web.Demo.", Qtype: dns.TypeAAAA, UDPSize: 512}},
		{name: "opt past end", pkt: append(withARCount(plain, 1), 0, 0, 41, 16, 0, 0, 0, 0, 0, 0, 9), want: got{Status: ParseFormErr, Name: "Web.Demo.", Qtype: dns.TypeAAAA, UDPSize: 512}},
		{name: "non-opt additional", pkt: append(withARCount(plain, 1), 0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0), want: got{Status: ParseSlow, Name: "Web.Demo.", Qtype: dns.TypeAAAA, UDPSize: 512}},
		{name: "name too long", pkt: longName(plain[:12]), want: got{Status: ParseFormErr, UDPSize: 512}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var q Query
			st := ParseQuery(tc.pkt, &q)
			g := got{Status: st, Qtype: q.QType, EDNS: q.EDNS, DO: q.DO, UDPSize: q.UDPSize}
			if q.Name() != nil {
				g.Name = wireName(q.Name())
				// The cache key is the same question, lowercased.
				if lk := wireName(q.LName()); lk != strings.ToLower(g.Name) {
					t.Errorf("key name %q, want %q", lk, strings.ToLower(g.Name))
				}
			}
			if diff := cmp.Diff(tc.want, g); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestInZone(t *testing.T) {
	zone := lowerWire(t, "Cluster.Local")
	tests := []struct {
		name string
		q    string
		want bool
	}{
		{name: "apex", q: "cluster.local.", want: true},
		{name: "below", q: "a.b.cluster.local.", want: true},
		{name: "label suffix is not a zone", q: "xcluster.local.", want: false},
		{name: "other zone", q: "example.org.", want: false},
		{name: "root", q: ".", want: false},
		{name: "label containing the zone bytes", q: "a\\007cluster\\005local.org.", want: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			name := lowerWire(t, tc.q)
			if got := InZone(name, zone); got != tc.want {
				t.Errorf("InZone(%q) = %v, want %v", tc.q, got, tc.want)
			}
		})
	}
}

func TestTruncate(t *testing.T) {
	m := newQuery("big.example.", dns.TypeA)
	m.Response = true
	for i := range 40 {
		m.Answer = append(m.Answer, mustRR(t, fmt.Sprintf("big.example. 30 IN A 10.0.0.%d", i)))
	}
	m.Ns = mustRRs(t, "example. 30 IN SOA ns.example. h.example. 1 2 3 4 5")
	m.Compress = true
	full := packMsg(t, m)
	tests := []struct {
		name        string
		limit       int
		wantAnswers int
		wantTC      bool
	}{
		{name: "fits", limit: len(full), wantAnswers: 40},
		{name: "cut in the authority section", limit: len(full) - 1, wantAnswers: 40, wantTC: true},
		{name: "cut in the answers", limit: 100, wantAnswers: (100 - 29) / 16, wantTC: true},
		{name: "question only", limit: 30, wantAnswers: 0, wantTC: true},
		{name: "not even the question", limit: 20, wantAnswers: 0, wantTC: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out := Truncate(append([]byte{}, full...), tc.limit)
			if len(out) > tc.limit {
				t.Errorf("%d bytes, limit %d", len(out), tc.limit)
			}
			r := new(dns.Msg)
			if err := r.Unpack(out); err != nil {
				t.Fatalf("truncated reply does not unpack: %v", err)
			}
			if len(r.Answer) != tc.wantAnswers || r.Truncated != tc.wantTC {
				t.Errorf("%d answers tc %v, want %d tc %v", len(r.Answer), r.Truncated, tc.wantAnswers, tc.wantTC)
			}
		})
	}
}

// TestLowerName checks the word-at-a-time lowercasing against the byte
// rule for every byte value, at every position of a word and in the tail.
func TestLowerName(t *testing.T) {
	lower := func(c byte) byte {
		if c >= 'A' && c <= 'Z' {
			return c + 'a' - 'A'
		}
		return c
	}
	for n := range 20 {
		for c := range 256 {
			for pos := range n {
				b := make([]byte, n)
				for i := range b {
					b[i] = byte(0xff - i*13) // neighbours of every kind
				}
				b[pos] = byte(c)
				want := make([]byte, n)
				for i := range b {
					want[i] = lower(b[i])
				}
				LowerName(b)
				if string(b) != string(want) {
					t.Fatalf("n=%d byte %#x at %d: got %x, want %x", n, c, pos, b, want)
				}
			}
		}
	}
}
