package proxy

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/pkg/nametable"
)

func packMsg(t *testing.T, m *dns.Msg) []byte {
	t.Helper()
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseQuery(t *testing.T) {
	plain := packMsg(t, newQuery("Web.Demo.", dns.TypeAAAA))
	edns := newQuery("web.demo.", dns.TypeA)
	edns.SetEdns0(4096, true)
	small := newQuery("web.demo.", dns.TypeA)
	small.SetEdns0(100, false)
	type got struct {
		Status  parseStatus
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
		{name: "plain query", pkt: plain, want: got{Status: parseOK, Name: "Web.Demo.", Qtype: dns.TypeAAAA, UDPSize: 512}},
		{name: "edns with do", pkt: packMsg(t, edns), want: got{Status: parseOK, Name: "web.demo.", Qtype: dns.TypeA, EDNS: true, DO: true, UDPSize: 4096}},
		{name: "edns size below 512", pkt: packMsg(t, small), want: got{Status: parseOK, Name: "web.demo.", Qtype: dns.TypeA, EDNS: true, UDPSize: 512}},
		{name: "short header", pkt: plain[:11], want: got{Status: parseDrop, UDPSize: 0}},
		{name: "response", pkt: func() []byte { b := append([]byte{}, plain...); b[2] |= 0x80; return b }(), want: got{Status: parseDrop, UDPSize: 512}},
		{name: "no question", pkt: func() []byte { b := append([]byte{}, plain...); b[5] = 0; return b }(), want: got{Status: parseFormErr, UDPSize: 512}},
		{name: "cut name", pkt: plain[:15], want: got{Status: parseFormErr, UDPSize: 512}},
		{name: "cut type", pkt: plain[:len(plain)-2], want: got{Status: parseFormErr, UDPSize: 512}},
		{name: "compressed name", pkt: append(append([]byte{}, plain[:12]...), 0xc0, 12, 0, 1, 0, 1), want: got{Status: parseSlow, UDPSize: 512}},
		{name: "answer records", pkt: func() []byte { b := append([]byte{}, plain...); b[7] = 1; return b }(), want: got{Status: parseSlow, Name: "Web.Demo.", Qtype: dns.TypeAAAA, UDPSize: 512}},
		{name: "opt past end", pkt: append(withARCount(plain, 1), 0, 0, 41, 16, 0, 0, 0, 0, 0, 0, 9), want: got{Status: parseFormErr, Name: "Web.Demo.", Qtype: dns.TypeAAAA, UDPSize: 512}},
		{name: "non-opt additional", pkt: append(withARCount(plain, 1), 0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0), want: got{Status: parseSlow, Name: "Web.Demo.", Qtype: dns.TypeAAAA, UDPSize: 512}},
		{name: "name too long", pkt: longName(plain[:12]), want: got{Status: parseFormErr, UDPSize: 512}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var q request
			st := parseQuery(tc.pkt, &q)
			g := got{Status: st, Qtype: q.qtype, EDNS: q.edns, DO: q.do, UDPSize: q.udpSize}
			if q.name() != nil {
				g.Name = wireName(q.name())
				// The cache key is the same question, lowercased.
				if lk := wireName(q.lname()); lk != strings.ToLower(g.Name) {
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
	zone, err := zoneWire("Cluster.Local")
	if err != nil {
		t.Fatal(err)
	}
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
			name, err := zoneWire(tc.q)
			if err != nil {
				t.Fatal(err)
			}
			if got := inZone(name, zone); got != tc.want {
				t.Errorf("inZone(%q) = %v, want %v", tc.q, got, tc.want)
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
			out := truncate(append([]byte{}, full...), tc.limit)
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

func TestShuffleRun(t *testing.T) {
	tests := []struct {
		name   string
		answer []string
		wantN  int
	}{
		{name: "addresses", answer: []string{"a. 1 IN A 10.0.0.1", "a. 1 IN A 10.0.0.2", "a. 1 IN A 10.0.0.3"}, wantN: 3},
		{name: "after a cname", answer: []string{"a. 1 IN CNAME b.", "b. 1 IN AAAA ::1", "b. 1 IN AAAA ::2"}, wantN: 2},
		{name: "single", answer: []string{"a. 1 IN A 10.0.0.1"}, wantN: 1},
		{name: "mixed families are separate runs", answer: []string{"a. 1 IN A 10.0.0.1", "a. 1 IN AAAA ::1", "a. 1 IN AAAA ::2"}, wantN: 2},
		{name: "no addresses", answer: []string{"a. 1 IN TXT \"x\""}, wantN: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := newQuery("a.", dns.TypeA)
			m.Response = true
			m.Answer = mustRRs(t, tc.answer...)
			m.Compress = true
			b := packMsg(t, m)
			off, size, n := shuffleRun(b)
			if n != tc.wantN {
				t.Fatalf("run of %d, want %d", n, tc.wantN)
			}
			if n > 1 {
				// Every record of the run has the same type at the same
				// place: rotating whole records keeps the message valid.
				typ := binary.BigEndian.Uint16(b[off+2:])
				for i := 1; i < n; i++ {
					if binary.BigEndian.Uint16(b[off+i*size+2:]) != typ {
						t.Errorf("record %d of the run has another type", i)
					}
				}
			}
		})
	}
}

func TestAnswerCacheBound(t *testing.T) {
	res := &fakeResolver{answer: staticAnswer(t, "A 192.0.2.1")}
	cfg := testConfig(res)
	cfg.MaxAnswers = 32
	h, err := NewHandler(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.SetTable(demoTable(t))
	for i := range 500 {
		pkt := packMsg(t, newQuery(fmt.Sprintf("name%d.example.org.", i), dns.TypeA))
		if r := h.Serve(t.Context(), nil, pkt, UDP); r == nil {
			t.Fatal("no reply")
		}
	}
	if n := h.state.Load().len(); n > 32 {
		t.Errorf("answer cache holds %d entries, bound 32", n)
	}
}

// The answers a table keeps are bounded in bytes, 2 KiB per name of the
// table within [128 KiB, MaxAnswerBytes], and answers stay right across
// the generations a full shard starts.
func TestAnswerCacheBytes(t *testing.T) {
	tbl, err := nametable.New([]nametable.Entry{{
		Hostname: "*.wild.example.org", IPs: []netip.Addr{netip.MustParseAddr("192.0.2.7")},
	}}, []string{"wild.example.org"}, nametable.Context{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(&fakeResolver{answer: staticAnswer(t, "A 192.0.2.1")})
	cfg.MaxAnswers = 1 << 20
	cfg.MaxAnswerBytes = 200 << 10
	h, err := NewHandler(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.SetTable(tbl)
	st := h.state.Load()
	if want := minAnswerBytes / answerShards; st.shardBytes != want {
		t.Errorf("budget per shard %d for a %d-name table, want the minimum %d", st.shardBytes, tbl.Len(), want)
	}
	for i := range 5000 {
		name := fmt.Sprintf("host-%d.wild.example.org.", i)
		for range 2 { // asked again: kept
			r := h.Serve(t.Context(), nil, packMsg(t, newQuery(name, dns.TypeA)), UDP)
			var m dns.Msg
			if err := m.Unpack(r); err != nil {
				t.Fatal(err)
			}
			if len(m.Answer) != 1 || m.Answer[0].(*dns.A).A.String() != "192.0.2.7" || m.Answer[0].Header().Name != name {
				t.Fatalf("%s: answer %v", name, m.Answer)
			}
		}
	}
	held := 0
	for i := range st.shards {
		sh := &st.shards[i]
		if sh.used > st.shardBytes {
			t.Errorf("shard %d holds %d bytes, bound %d", i, sh.used, st.shardBytes)
		}
		for k, a := range sh.m {
			held += len(k) + len(a.msg) + answerOverhead
		}
	}
	if held > minAnswerBytes {
		t.Errorf("cache holds %d bytes, bound %d", held, minAnswerBytes)
	}
	if n := st.len(); n < 100 {
		t.Errorf("cache holds %d answers after 5000 questions; the bound should leave room for hundreds", n)
	}
}

// Random forwarded names do not evict the table's answers.
func TestForwardedNamesDoNotEvictAnswers(t *testing.T) {
	cfg := testConfig(&fakeResolver{answer: staticAnswer(t, "A 192.0.2.1")})
	cfg.MaxAnswers = answerShards // one entry per shard
	h, err := NewHandler(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tbl := demoTable(t)
	h.SetTable(tbl)
	known := packMsg(t, newQuery("web.demo.svc.cluster.local.", dns.TypeA))
	for range 2 { // asked again: kept
		h.Serve(t.Context(), nil, known, UDP)
	}
	for i := range 300 {
		q := packMsg(t, newQuery(fmt.Sprintf("r%d.cdn.example.", i), dns.TypeA))
		for range 2 { // each would be kept too, if the shard had room
			h.Serve(t.Context(), nil, q, UDP)
		}
	}
	before := tbl.lookups.Load()
	for range 10 {
		if r := h.Serve(t.Context(), nil, known, UDP); r == nil || binary.BigEndian.Uint16(r[6:]) != 3 {
			t.Fatalf("known name: %x", r)
		}
	}
	if n := tbl.lookups.Load() - before; n != 0 {
		t.Errorf("known name looked up %d more times: its answer was evicted", n)
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
				lowerName(b)
				if string(b) != string(want) {
					t.Fatalf("n=%d byte %#x at %d: got %x, want %x", n, c, pos, b, want)
				}
			}
		}
	}
}
