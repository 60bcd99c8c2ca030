package proxy

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"

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
