package proxy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"
)

func TestParseQueryLogClasses(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    QueryLogClass
		wantErr bool
	}{
		{name: "empty", in: "", want: 0},
		{name: "off", in: "off", want: 0},
		{name: "one", in: "nxdomain", want: LogNXDomain},
		{name: "several", in: "nxdomain, servfail,upstream_error", want: LogNXDomain | LogServFail | LogUpstreamError},
		{name: "all and denied", in: "denied,all", want: LogDenied | LogAll},
		{name: "unknown", in: "nxdomain,bogus", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseQueryLogClasses(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
			if !tc.wantErr {
				back, err := ParseQueryLogClasses(got.String())
				if err != nil || back != got {
					t.Errorf("String %q parses back to %v, %v", got.String(), back, err)
				}
			}
		})
	}
}

// syncBuffer collects log output written from the server's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// lines returns the JSON lines written so far.
func (b *syncBuffer) lines(t testing.TB) []map[string]any {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(b.buf.Bytes()))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("not a JSON line %q: %v", sc.Text(), err)
		}
		out = append(out, m)
	}
	return out
}

// queryLogServer serves the demo table over real sockets with the query
// log written to the returned buffer, the pod named as the agent does.
// Names outside the table fail upstream unless ok.example.org.
func queryLogServer(t *testing.T, reg *testRegistry, now func() time.Time, intN func(int) int) (*Server, *syncBuffer) {
	t.Helper()
	out := &syncBuffer{}
	res := &fakeResolver{answer: func(q dns.Question) (*dns.Msg, error) {
		if q.Name == "ok.example.org." {
			return staticAnswer(t, "A 192.0.2.1")(q)
		}
		return nil, errors.New("upstream 192.0.2.53:53 timed out")
	}}
	cfg := testConfig(res)
	cfg.Registry = reg
	cfg.QueryLogger = slog.New(slog.NewJSONHandler(out, nil)).With("namespace", "demo", "pod", "web-0")
	s := startServer(t, cfg)
	// Read only by SetQueryLog, on this goroutine.
	s.h.obs.SetQueryLogClock(now, intN)
	s.SetTable(demoTable(t))
	return s, out
}

func TestQueryLogClasses(t *testing.T) {
	s, out := queryLogServer(t, newTestRegistry(), nil, nil)
	ask := func() {
		exchange(t, "udp", udpAddr(s), newQuery("web.demo.svc.cluster.local.", dns.TypeA))  // NOERROR, table
		exchange(t, "udp", udpAddr(s), newQuery("nope.demo.svc.cluster.local.", dns.TypeA)) // NXDOMAIN, table
		exchange(t, "tcp", tcpAddr(s), newQuery("bad.example.org.", dns.TypeAAAA))          // SERVFAIL, upstream error
		exchange(t, "udp", udpAddr(s), newQuery("ok.example.org.", dns.TypeA))              // NOERROR, forwarded
	}
	type line struct{ Qname, Qtype, Rcode, Source, Protocol, Namespace, Pod string }
	nx := line{Qname: "nope.demo.svc.cluster.local.", Qtype: "A", Rcode: "NXDOMAIN", Source: "table", Protocol: "udp", Namespace: "demo", Pod: "web-0"}
	sf := line{Qname: "bad.example.org.", Qtype: "AAAA", Rcode: "SERVFAIL", Source: "upstream", Protocol: "tcp", Namespace: "demo", Pod: "web-0"}
	ok := line{Qname: "web.demo.svc.cluster.local.", Qtype: "A", Rcode: "NOERROR", Source: "table", Protocol: "udp", Namespace: "demo", Pod: "web-0"}
	fw := line{Qname: "ok.example.org.", Qtype: "A", Rcode: "NOERROR", Source: "cache", Protocol: "udp", Namespace: "demo", Pod: "web-0"}
	tests := []struct {
		name    string
		classes QueryLogClass
		want    []line
	}{
		{name: "off", classes: 0, want: nil},
		{name: "nxdomain", classes: LogNXDomain, want: []line{nx}},
		{name: "servfail", classes: LogServFail, want: []line{sf}},
		{name: "upstream_error", classes: LogUpstreamError, want: []line{sf}},
		{name: "denied matches nothing yet", classes: LogDenied, want: nil},
		{name: "all", classes: LogAll, want: []line{ok, nx, sf, fw}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out.mu.Lock()
			out.buf.Reset()
			out.mu.Unlock()
			s.SetQueryLog(QueryLogConfig{Classes: tc.classes})
			ask()
			var got []line
			for _, m := range out.lines(t) {
				str := func(k string) string { v, _ := m[k].(string); return v }
				got = append(got, line{Qname: str("qname"), Qtype: str("qtype"), Rcode: str("rcode"), Source: str("source"),
					Protocol: str("protocol"), Namespace: str("namespace"), Pod: str("pod")})
				if d, ok := m["duration"].(float64); !ok || d <= 0 {
					t.Errorf("line %v: duration %v, want > 0", m, m["duration"])
				}
				if str("rcode") == "SERVFAIL" && str("err") == "" {
					t.Errorf("upstream error line without err: %v", m)
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("lines (-want +got):\n%s", diff)
			}
		})
	}
}

// Sampling and the rate cap, with the random numbers and the clock in the
// test's hands: every third random draw is 0 (kept), and the cap of 2
// lines a second resets when the clock moves on.
func TestQueryLogSampleAndRate(t *testing.T) {
	var mu sync.Mutex
	draws := 0
	intN := func(n int) int {
		mu.Lock()
		defer mu.Unlock()
		draws++
		return draws % 3 % n
	}
	clock := time.Unix(1000, 0)
	now := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return clock
	}
	reg := newTestRegistry()
	s, out := queryLogServer(t, reg, now, intN)
	s.SetQueryLog(QueryLogConfig{Classes: LogNXDomain, Sample: 3, Rate: 2})
	if got := s.QueryLog(); got != (QueryLogConfig{Classes: LogNXDomain, Sample: 3, Rate: 2}) {
		t.Errorf("QueryLog() = %+v", got)
	}
	nx := func(n int) {
		for range n {
			exchange(t, "udp", udpAddr(s), newQuery("nope.demo.svc.cluster.local.", dns.TypeA))
		}
	}
	nx(12) // draws 3, 6, 9, 12 are kept: 4 sampled in, 2 over the cap
	if got := len(out.lines(t)); got != 2 {
		t.Errorf("lines in the first second = %d, want 2 (the cap)", got)
	}
	mu.Lock()
	clock = clock.Add(time.Second)
	mu.Unlock()
	nx(3) // draw 15 is kept, in a new second
	if got := len(out.lines(t)); got != 3 {
		t.Errorf("lines after a second = %d, want 3", got)
	}
	for _, tc := range []struct {
		outcome string
		want    float64
	}{{"written", 3}, {"sampled_out", 10}, {"rate_limited", 2}} {
		if got := reg.value(t, "meshdns_dns_query_log_lines_total", tc.outcome); got != tc.want {
			t.Errorf("query log %s = %v, want %v", tc.outcome, got, tc.want)
		}
	}
}

// Malformed packets with the log on for everything: FORMERR lines, no
// crash, and the server still answers.
func TestQueryLogMalformed(t *testing.T) {
	s, out := queryLogServer(t, newTestRegistry(), nil, nil)
	s.SetQueryLog(QueryLogConfig{Classes: LogAll})
	for _, pkt := range [][]byte{
		{1, 2, 3},                                        // shorter than a header: dropped
		{0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 63},         // question cut short
		{0, 2, 0x78, 0, 0, 0, 0, 0, 0, 0, 0, 0},          // unknown opcode, no question
		{0, 3, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0xc0, 0x0c}, // compression loop
	} {
		rawExchange(t, udpAddr(s), pkt, 100*time.Millisecond)
	}
	if m := exchange(t, "udp", udpAddr(s), newQuery("web.demo.svc.cluster.local.", dns.TypeA)); m.Rcode != dns.RcodeSuccess {
		t.Fatalf("after malformed packets: rcode %d", m.Rcode)
	}
	lines := out.lines(t)
	if len(lines) < 2 {
		t.Fatalf("lines %v, want the malformed replies and the good one", lines)
	}
	if last := lines[len(lines)-1]; last["qname"] != "web.demo.svc.cluster.local." {
		t.Errorf("last line %v", last)
	}
}

// SetQueryLog while queries are served over real sockets: the race
// detector's test that the swap is safe, and every query is answered.
func TestQueryLogSwapWhileServing(t *testing.T) {
	s, out := queryLogServer(t, newTestRegistry(), nil, nil)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 200 {
			s.SetQueryLog(QueryLogConfig{Classes: QueryLogClass(i % 32), Sample: i % 3, Rate: i % 5})
		}
	}()
	for range 50 {
		if m := exchange(t, "udp", udpAddr(s), newQuery("nope.demo.svc.cluster.local.", dns.TypeA)); m.Rcode != dns.RcodeNameError {
			t.Fatalf("rcode %d, want NXDOMAIN", m.Rcode)
		}
	}
	<-done
	s.SetQueryLog(QueryLogConfig{Classes: LogNXDomain})
	before := len(out.lines(t))
	exchange(t, "udp", udpAddr(s), newQuery("nope.demo.svc.cluster.local.", dns.TypeA))
	if got := len(out.lines(t)); got != before+1 {
		t.Errorf("lines %d after the last swap, want %d", got, before+1)
	}
}
