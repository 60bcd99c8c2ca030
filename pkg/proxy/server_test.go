package proxy

import (
	"context"
	"errors"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"
	"go.uber.org/goleak"

	"github.com/meshdns/meshdns/internal/dnswire"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
	"github.com/meshdns/meshdns/pkg/nametable"
	"github.com/meshdns/meshdns/pkg/proxy/upstream"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// Case is one question and the reply we expect, in zone-file text.
type Case struct {
	Name    string
	Qname   string
	Qtype   uint16
	Rcode   int
	AA      bool
	Answer  []string
	Ns      []string
	Network string // "udp" (default) or "tcp"
}

func TestServeAnswers(t *testing.T) {
	res := &fakeResolver{answer: staticAnswer(t, "A 192.0.2.7", "A 192.0.2.8", "CNAME web.example.org.")}
	res.src = upstream.SourceUpstream
	s := startServer(t, testConfig(res))
	s.SetTable(demoTable(t))
	soa := "cluster.local.\t30\tIN\tSOA\tns.dns.cluster.local. hostmaster.cluster.local. 1 7200 1800 86400 30"

	cases := []Case{
		{
			Name: "known name", Qname: "web.demo.svc.cluster.local.", Qtype: dns.TypeA, AA: true,
			Answer: []string{
				"web.demo.svc.cluster.local.\t30\tIN\tA\t10.0.0.1",
				"web.demo.svc.cluster.local.\t30\tIN\tA\t10.0.0.2",
				"web.demo.svc.cluster.local.\t30\tIN\tA\t10.0.0.3",
			},
		},
		{
			Name: "spelling echoed", Qname: "WeB.Demo.SVC.cluster.LOCAL.", Qtype: dns.TypeA, AA: true,
			Answer: []string{
				"WeB.Demo.SVC.cluster.LOCAL.\t30\tIN\tA\t10.0.0.1",
				"WeB.Demo.SVC.cluster.LOCAL.\t30\tIN\tA\t10.0.0.2",
				"WeB.Demo.SVC.cluster.LOCAL.\t30\tIN\tA\t10.0.0.3",
			},
		},
		{
			Name: "over tcp", Qname: "web.demo.svc.cluster.local.", Qtype: dns.TypeA, AA: true, Network: "tcp",
			Answer: []string{
				"web.demo.svc.cluster.local.\t30\tIN\tA\t10.0.0.1",
				"web.demo.svc.cluster.local.\t30\tIN\tA\t10.0.0.2",
				"web.demo.svc.cluster.local.\t30\tIN\tA\t10.0.0.3",
			},
		},
		{
			Name: "search expanded", Qname: "web.demo.svc.cluster.local.demo.svc.cluster.local.", Qtype: dns.TypeA, AA: true,
			Answer: []string{
				"web.demo.svc.cluster.local.demo.svc.cluster.local.\t30\tIN\tCNAME\tweb.demo.svc.cluster.local.",
				"web.demo.svc.cluster.local.\t30\tIN\tA\t10.0.0.1",
				"web.demo.svc.cluster.local.\t30\tIN\tA\t10.0.0.2",
				"web.demo.svc.cluster.local.\t30\tIN\tA\t10.0.0.3",
			},
		},
		{
			Name: "nodata", Qname: "web.demo.svc.cluster.local.", Qtype: dns.TypeAAAA, AA: true,
			Ns: []string{soa},
		},
		{
			Name: "authoritative nxdomain", Qname: "nope.demo.svc.cluster.local.", Qtype: dns.TypeA, AA: true,
			Rcode: dns.RcodeNameError, Ns: []string{soa},
		},
		{
			Name: "forwarded", Qname: "www.example.org.", Qtype: dns.TypeA,
			Answer: []string{"www.example.org.\t60\tIN\tA\t192.0.2.7", "www.example.org.\t60\tIN\tA\t192.0.2.8"},
		},
		{
			Name: "forwarded over tcp", Qname: "www.example.org.", Qtype: dns.TypeA, Network: "tcp",
			Answer: []string{"www.example.org.\t60\tIN\tA\t192.0.2.7", "www.example.org.\t60\tIN\tA\t192.0.2.8"},
		},
		{
			Name: "external name chased", Qname: "db.demo.svc.cluster.local.", Qtype: dns.TypeA,
			Answer: []string{
				"db.demo.svc.cluster.local.\t30\tIN\tCNAME\tdb.example.org.",
				"db.example.org.\t60\tIN\tA\t192.0.2.7",
				"db.example.org.\t60\tIN\tA\t192.0.2.8",
			},
		},
		{
			Name: "external name cname only", Qname: "db.demo.svc.cluster.local.", Qtype: dns.TypeCNAME,
			Answer: []string{"db.demo.svc.cluster.local.\t30\tIN\tCNAME\tdb.example.org."},
		},
	}
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			network, addr := "udp", udpAddr(s)
			if tc.Network == "tcp" {
				network, addr = "tcp", tcpAddr(s)
			}
			m := newQuery(tc.Qname, tc.Qtype)
			r := exchange(t, network, addr, m)
			if r.Id != m.Id {
				t.Errorf("ID = %d, want %d", r.Id, m.Id)
			}
			if r.Rcode != tc.Rcode || r.Authoritative != tc.AA || !r.RecursionDesired || !r.RecursionAvailable {
				t.Errorf("rcode %s aa %v rd %v ra %v, want %s aa %v rd ra",
					dns.RcodeToString[r.Rcode], r.Authoritative, r.RecursionDesired, r.RecursionAvailable,
					dns.RcodeToString[tc.Rcode], tc.AA)
			}
			if diff := cmp.Diff(m.Question, r.Question); diff != "" {
				t.Errorf("question (-want +got):\n%s", diff)
			}
			got := rrStrings(r.Answer)
			sortAddrRuns(got)
			if diff := cmp.Diff(tc.Answer, got); diff != "" {
				t.Errorf("answer (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.Ns, rrStrings(r.Ns)); diff != "" {
				t.Errorf("authority (-want +got):\n%s", diff)
			}
		})
	}
}

// sortAddrRuns sorts the answer strings after any CNAMEs, since address
// records are rotated per reply.
func sortAddrRuns(rrs []string) {
	i := 0
	for i < len(rrs) && containsCNAME(rrs[i]) {
		i++
	}
	sort.Strings(rrs[i:])
}

func containsCNAME(s string) bool {
	for i := 0; i+5 <= len(s); i++ {
		if s[i:i+5] == "CNAME" {
			return true
		}
	}
	return false
}

func TestShuffle(t *testing.T) {
	s := startServer(t, testConfig(&fakeResolver{}))
	s.SetTable(demoTable(t))
	firsts := map[string]int{}
	for range 60 {
		r := exchange(t, "udp", udpAddr(s), newQuery("web.demo.svc.cluster.local.", dns.TypeA))
		if len(r.Answer) != 3 {
			t.Fatalf("got %d answers, want 3", len(r.Answer))
		}
		firsts[r.Answer[0].(*dns.A).A.String()]++
	}
	// Each of the 3 addresses comes first 1/3 of the time; 60 tries
	// without one of them happens with probability 3*(2/3)^60 ~ 1e-10.
	if len(firsts) != 3 {
		t.Errorf("first addresses over 60 replies: %v, want all three", firsts)
	}
}

func TestTruncation(t *testing.T) {
	s := startServer(t, testConfig(&fakeResolver{}))
	s.SetTable(demoTable(t))
	tests := []struct {
		name     string
		network  string
		ednsSize uint16 // 0: no EDNS
		wantTC   bool
		wantMax  int
		wantAll  bool
	}{
		{name: "udp without edns fits 512", network: "udp", wantTC: true, wantMax: 512},
		{name: "udp edns 1232", network: "udp", ednsSize: 1232, wantTC: true, wantMax: 1232},
		{name: "udp edns below 512 counts as 512", network: "udp", ednsSize: 100, wantTC: true, wantMax: 512},
		{name: "udp edns 4096 gets all", network: "udp", ednsSize: 4096, wantAll: true, wantMax: 4096},
		{name: "tcp gets all", network: "tcp", wantAll: true, wantMax: 65535},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := newQuery("big.demo.svc.cluster.local.", dns.TypeAAAA)
			if tc.ednsSize > 0 {
				m.SetEdns0(tc.ednsSize, false)
			}
			addr := udpAddr(s)
			if tc.network == "tcp" {
				addr = tcpAddr(s)
			}
			var packed []byte
			r := new(dns.Msg)
			if tc.network == "tcp" {
				r = exchange(t, tc.network, addr, m)
			} else {
				// Measure what came over the wire, not a re-pack.
				pkt, err := m.Pack()
				if err != nil {
					t.Fatal(err)
				}
				if packed = rawExchange(t, addr, pkt, 2*time.Second); packed == nil {
					t.Fatal("no reply")
				}
				if err := r.Unpack(packed); err != nil {
					t.Fatalf("unpack: %v", err)
				}
			}
			if r.Truncated != tc.wantTC {
				t.Errorf("TC = %v, want %v", r.Truncated, tc.wantTC)
			}
			if len(packed) > tc.wantMax {
				t.Errorf("reply is %d bytes, want <= %d", len(packed), tc.wantMax)
			}
			if tc.wantAll && len(r.Answer) != 60 {
				t.Errorf("got %d answers, want 60", len(r.Answer))
			}
			if !tc.wantAll && len(r.Answer) == 60 {
				t.Errorf("got all 60 answers in a truncated reply")
			}
			if (tc.ednsSize > 0) != (r.IsEdns0() != nil) {
				t.Errorf("OPT in reply = %v, want %v", r.IsEdns0() != nil, tc.ednsSize > 0)
			}
		})
	}
}

func TestProtocolHygiene(t *testing.T) {
	s := startServer(t, testConfig(&fakeResolver{answer: staticAnswer(t, "A 192.0.2.1")}))
	s.SetTable(demoTable(t))
	tests := []struct {
		name      string
		msg       func() *dns.Msg
		wantRcode int
		wantOPT   bool
		wantDO    bool
		wantQ     bool
	}{
		{
			name: "opt echoed with our size",
			msg: func() *dns.Msg {
				m := newQuery("web.demo.svc.cluster.local.", dns.TypeA)
				m.SetEdns0(4096, false)
				return m
			},
			wantRcode: dns.RcodeSuccess, wantOPT: true, wantQ: true,
		},
		{
			name: "do bit echoed",
			msg: func() *dns.Msg {
				m := newQuery("web.demo.svc.cluster.local.", dns.TypeA)
				m.SetEdns0(4096, true)
				return m
			},
			wantRcode: dns.RcodeSuccess, wantOPT: true, wantDO: true, wantQ: true,
		},
		{
			name: "edns version 1 gets badvers",
			msg: func() *dns.Msg {
				m := newQuery("web.demo.svc.cluster.local.", dns.TypeA)
				m.SetEdns0(4096, false)
				m.IsEdns0().SetVersion(1)
				return m
			},
			wantRcode: dns.RcodeBadVers, wantOPT: true, wantQ: true,
		},
		{
			name: "notify gets notimp",
			msg: func() *dns.Msg {
				m := newQuery("web.demo.svc.cluster.local.", dns.TypeSOA)
				m.Opcode = dns.OpcodeNotify
				return m
			},
			wantRcode: dns.RcodeNotImplemented, wantQ: true,
		},
		{
			name: "update gets notimp",
			msg: func() *dns.Msg {
				m := newQuery("demo.svc.cluster.local.", dns.TypeSOA)
				m.Opcode = dns.OpcodeUpdate
				return m
			},
			wantRcode: dns.RcodeNotImplemented, wantQ: true,
		},
		{
			name: "two questions get formerr",
			msg: func() *dns.Msg {
				m := newQuery("web.demo.svc.cluster.local.", dns.TypeA)
				m.Question = append(m.Question, m.Question[0])
				return m
			},
			wantRcode: dns.RcodeFormatError,
		},
		{
			name: "answer section in a query takes the slow path",
			msg: func() *dns.Msg {
				m := newQuery("web.demo.svc.cluster.local.", dns.TypeA)
				m.Answer = mustRRs(t, "web.demo.svc.cluster.local. 5 IN A 10.9.9.9")
				return m
			},
			wantRcode: dns.RcodeSuccess, wantQ: true,
		},
		{
			name: "two opt records get formerr",
			msg: func() *dns.Msg {
				m := newQuery("web.demo.svc.cluster.local.", dns.TypeA)
				m.SetEdns0(4096, false)
				m.Extra = append(m.Extra, m.Extra[0])
				return m
			},
			wantRcode: dns.RcodeFormatError,
		},
		{
			name: "extra non-opt record takes the slow path",
			msg: func() *dns.Msg {
				m := newQuery("web.demo.svc.cluster.local.", dns.TypeA)
				m.SetEdns0(4096, false)
				m.Extra = append(m.Extra, mustRR(t, "extra. 0 IN TXT \"x\""))
				return m
			},
			wantRcode: dns.RcodeSuccess, wantOPT: true, wantQ: true,
		},
		{
			name: "chaos class is forwarded",
			msg: func() *dns.Msg {
				m := newQuery("version.bind.", dns.TypeTXT)
				m.Question[0].Qclass = dns.ClassCHAOS
				return m
			},
			wantRcode: dns.RcodeSuccess, wantQ: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := tc.msg()
			pkt, err := m.Pack()
			if err != nil {
				t.Fatal(err)
			}
			raw := rawExchange(t, udpAddr(s), pkt, 2*time.Second)
			if raw == nil {
				t.Fatal("no reply")
			}
			r := new(dns.Msg)
			if err := r.Unpack(raw); err != nil {
				t.Fatalf("unpack reply: %v", err)
			}
			if r.Id != m.Id || !r.Response || r.Opcode != m.Opcode {
				t.Errorf("id %d response %v opcode %d, want %d true %d", r.Id, r.Response, r.Opcode, m.Id, m.Opcode)
			}
			if r.Rcode != tc.wantRcode {
				t.Errorf("rcode = %s, want %s", dns.RcodeToString[r.Rcode], dns.RcodeToString[tc.wantRcode])
			}
			opt := r.IsEdns0()
			if (opt != nil) != tc.wantOPT {
				t.Fatalf("OPT = %v, want %v", opt, tc.wantOPT)
			}
			if opt != nil {
				if opt.UDPSize() != dnswire.EDNSSize || opt.Version() != 0 || opt.Do() != tc.wantDO {
					t.Errorf("OPT size %d version %d do %v, want %d 0 %v", opt.UDPSize(), opt.Version(), opt.Do(), dnswire.EDNSSize, tc.wantDO)
				}
			}
			if tc.wantQ {
				if diff := cmp.Diff(m.Question[:1], r.Question); diff != "" {
					t.Errorf("question (-want +got):\n%s", diff)
				}
			}
		})
	}
}

func TestMalformedPackets(t *testing.T) {
	res := &fakeResolver{answer: staticAnswer(t, "A 192.0.2.1")}
	s := startServer(t, testConfig(res))
	s.SetTable(demoTable(t))
	valid, _ := newQuery("web.demo.svc.cluster.local.", dns.TypeA).Pack()
	asResponse := append([]byte(nil), valid...)
	asResponse[2] |= 0x80
	tests := []struct {
		name      string
		pkt       []byte
		wantReply bool
		wantRcode int
	}{
		{name: "short header dropped", pkt: []byte{1, 2, 3}},
		{name: "response dropped", pkt: asResponse},
		{name: "header only", pkt: valid[:12], wantReply: true, wantRcode: dns.RcodeFormatError},
		// RFC 8906 3.1.4: an unknown opcode is NOTIMP, even header-only.
		{name: "header only, unknown opcode", pkt: withOpcode(valid[:12], 15), wantReply: true, wantRcode: dns.RcodeNotImplemented},
		{name: "header only, status opcode", pkt: withOpcode(valid[:12], dns.OpcodeStatus), wantReply: true, wantRcode: dns.RcodeNotImplemented},
		{name: "bad question, unknown opcode", pkt: withOpcode(valid[:20], 15), wantReply: true, wantRcode: dns.RcodeNotImplemented},
		{name: "compression loop, unknown opcode", pkt: withOpcode(append(append([]byte{}, valid[:12]...), 0xc0, 12, 0, 1, 0, 1), 15),
			wantReply: true, wantRcode: dns.RcodeNotImplemented},
		{name: "question cut short", pkt: valid[:20], wantReply: true, wantRcode: dns.RcodeFormatError},
		{name: "compression loop", pkt: append(append([]byte{}, valid[:12]...), 0xc0, 12, 0, 1, 0, 1), wantReply: true, wantRcode: dns.RcodeFormatError},
		{name: "pointer past end", pkt: append(append([]byte{}, valid[:12]...), 0xc0, 200, 0, 1, 0, 1), wantReply: true, wantRcode: dns.RcodeFormatError},
		{name: "name too long", pkt: longName(valid[:12]), wantReply: true, wantRcode: dns.RcodeFormatError},
		{name: "opt cut short", pkt: append(withARCount(valid, 1), 0, 0, 41), wantReply: true, wantRcode: dns.RcodeFormatError},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			raw := rawExchange(t, udpAddr(s), tc.pkt, 300*time.Millisecond)
			if (raw != nil) != tc.wantReply {
				t.Fatalf("reply = %x, want reply %v", raw, tc.wantReply)
			}
			if raw == nil {
				return
			}
			r := new(dns.Msg)
			if err := r.Unpack(raw); err != nil {
				t.Fatalf("unpack reply: %v", err)
			}
			if r.Rcode != tc.wantRcode || r.Id != 0xffff&uint16(tc.pkt[0])<<8|uint16(tc.pkt[1]) {
				t.Errorf("rcode %s id %d", dns.RcodeToString[r.Rcode], r.Id)
			}
			if op := int(tc.pkt[2]>>3) & 0xf; r.Opcode != op {
				t.Errorf("opcode %d, want the query's %d echoed", r.Opcode, op)
			}
		})
	}
	// The server still answers after all that.
	r := exchange(t, "udp", udpAddr(s), newQuery("web.demo.svc.cluster.local.", dns.TypeA))
	if len(r.Answer) != 3 {
		t.Errorf("after malformed packets: %d answers, want 3", len(r.Answer))
	}
}

// withOpcode returns pkt with the header's opcode set to op.
func withOpcode(pkt []byte, op int) []byte {
	out := append([]byte(nil), pkt...)
	out[2] = out[2]&^0x78 | byte(op<<3)&0x78
	return out
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

func TestBeforeFirstTable(t *testing.T) {
	res := &fakeResolver{answer: staticAnswer(t, "A 192.0.2.1")}
	s := startServer(t, testConfig(res))
	tests := []struct {
		name      string
		qname     string
		wantRcode int
		wantCalls int64
	}{
		{name: "cluster name gets servfail", qname: "web.demo.svc.cluster.local.", wantRcode: dns.RcodeServerFailure},
		{name: "cluster apex gets servfail", qname: "CLUSTER.local.", wantRcode: dns.RcodeServerFailure},
		{name: "external name forwarded", qname: "www.example.org.", wantCalls: 1},
		{name: "lookalike forwarded", qname: "notcluster.local.", wantCalls: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := res.calls.Load()
			r := exchange(t, "udp", udpAddr(s), newQuery(tc.qname, dns.TypeA))
			if r.Rcode != tc.wantRcode {
				t.Errorf("rcode = %s, want %s", dns.RcodeToString[r.Rcode], dns.RcodeToString[tc.wantRcode])
			}
			if got := res.calls.Load() - before; got != tc.wantCalls {
				t.Errorf("resolver calls = %d, want %d", got, tc.wantCalls)
			}
		})
	}
	if s.Ready() {
		t.Errorf("Ready before a table")
	}
	s.SetTable(demoTable(t))
	if !s.Ready() {
		t.Errorf("not Ready after SetTable")
	}
	if r := exchange(t, "udp", udpAddr(s), newQuery("web.demo.svc.cluster.local.", dns.TypeA)); len(r.Answer) != 3 {
		t.Errorf("after SetTable: %d answers, want 3", len(r.Answer))
	}
}

func TestResolverErrors(t *testing.T) {
	tests := []struct {
		name      string
		err       error
		wantRcode int
	}{
		{name: "overloaded gets refused", err: upstream.ErrOverloaded, wantRcode: dns.RcodeRefused},
		{name: "wrapped overloaded gets refused", err: errors.Join(errors.New("x"), upstream.ErrOverloaded), wantRcode: dns.RcodeRefused},
		{name: "other errors get servfail", err: errors.New("all upstreams failed"), wantRcode: dns.RcodeServerFailure},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := &fakeResolver{answer: func(dns.Question) (*dns.Msg, error) { return nil, tc.err }}
			s := startServer(t, testConfig(res))
			s.SetTable(demoTable(t))
			for _, qname := range []string{"www.example.org.", "db.demo.svc.cluster.local."} {
				m := newQuery(qname, dns.TypeA)
				m.SetEdns0(1232, false)
				r := exchange(t, "udp", udpAddr(s), m)
				if r.Rcode != tc.wantRcode || r.IsEdns0() == nil {
					t.Errorf("%s: rcode = %s, opt %v; want %s with OPT", qname, dns.RcodeToString[r.Rcode], r.IsEdns0() != nil, dns.RcodeToString[tc.wantRcode])
				}
			}
		})
	}
}

// A slow upstream must not delay table answers: the UDP readers hand
// forwarded queries to workers.
func TestSlowUpstreamDoesNotBlockTable(t *testing.T) {
	res := &fakeResolver{answer: staticAnswer(t, "A 192.0.2.1"), block: make(chan struct{})}
	cfg := testConfig(res)
	cfg.UDPSockets = 1
	s := startServer(t, cfg)
	s.SetTable(demoTable(t))
	done := make(chan *dns.Msg, 4)
	for range 4 {
		go func() {
			c := &dns.Client{Timeout: 5 * time.Second}
			r, _, _ := c.Exchange(newQuery("slow.example.org.", dns.TypeA), udpAddr(s))
			done <- r
		}()
	}
	testenv.Eventually(t, "4 queries waiting upstream", 5*time.Second, func() bool { return res.calls.Load() >= 4 })
	// Every worker is stuck; the table answer still comes (within the
	// exchange's timeout), before the upstream is released.
	r := exchange(t, "udp", udpAddr(s), newQuery("web.demo.svc.cluster.local.", dns.TypeA))
	if len(r.Answer) != 3 {
		t.Errorf("table answer while upstream hangs: %d answers", len(r.Answer))
	}
	if got := res.calls.Load(); got != 4 {
		t.Errorf("resolver calls %d, want 4: the table name went upstream", got)
	}
	close(res.block)
	for range 4 {
		if r := <-done; r == nil || len(r.Answer) != 1 {
			t.Errorf("forwarded reply after unblocking = %v", r)
		}
	}
}

func TestForwardingBound(t *testing.T) {
	res := &fakeResolver{answer: staticAnswer(t, "A 192.0.2.1"), block: make(chan struct{})}
	cfg := testConfig(res)
	cfg.UDPSockets = 1
	cfg.MaxForwarding = 2
	s := startServer(t, cfg)
	s.SetTable(demoTable(t))
	var wg sync.WaitGroup
	defer wg.Wait()
	for range 2 {
		wg.Go(func() {
			c := &dns.Client{Timeout: 5 * time.Second}
			_, _, _ = c.Exchange(newQuery("slow.example.org.", dns.TypeA), udpAddr(s))
		})
	}
	testenv.Eventually(t, "2 queries waiting upstream", 5*time.Second, func() bool { return res.calls.Load() >= 2 })
	r := exchange(t, "udp", udpAddr(s), newQuery("third.example.org.", dns.TypeA))
	if r.Rcode != dns.RcodeRefused {
		t.Errorf("beyond MaxForwarding: rcode = %s, want REFUSED", dns.RcodeToString[r.Rcode])
	}
	close(res.block)
}

func TestTableSwap(t *testing.T) {
	s := startServer(t, testConfig(&fakeResolver{answer: staticAnswer(t, "A 192.0.2.1")}))
	first := demoTable(t)
	s.SetTable(first)
	for range 4 {
		exchange(t, "udp", udpAddr(s), newQuery("web.demo.svc.cluster.local.", dns.TypeA))
	}
	if got := first.lookups.Load(); got != 2 {
		t.Errorf("lookups for 4 identical queries = %d, want 2 (answer kept when asked again)", got)
	}
	second := &fakeTable{results: map[string]nametable.Result{
		"web.demo.svc.cluster.local./A": {Action: nametable.Answer, Answer: mustRRs(t, "x. 5 IN A 10.1.1.1")},
	}}
	s.SetTable(second)
	r := exchange(t, "udp", udpAddr(s), newQuery("web.demo.svc.cluster.local.", dns.TypeA))
	if diff := cmp.Diff([]string{"web.demo.svc.cluster.local.\t5\tIN\tA\t10.1.1.1"}, rrStrings(r.Answer)); diff != "" {
		t.Errorf("after swap (-want +got):\n%s", diff)
	}
}

// cacheOnly is a Resolver with "www.example.org A" in its cache, so the
// test sees which path each query took.
type cacheOnly struct {
	*fakeResolver
	hits, misses atomic.Int64
}

func (c *cacheOnly) AppendCached(dst, qwire, key []byte, _ *upstream.Probe) ([]byte, upstream.Source, bool) {
	if string(key[:len(key)-4]) != "\x03www\x07example\x03org\x00" {
		c.misses.Add(1)
		return dst, upstream.SourceCache, false
	}
	c.hits.Add(1)
	out, _, err := c.fakeResolver.Resolve(context.Background(), dst, qwire, key, nil)
	return out, upstream.SourceCache, err == nil
}

// TestOnePass checks the walk of a query: the cache is probed once, on the
// reader, with the lowercased key; a miss reaches Resolve once, from a
// worker, without a second probe.
func TestOnePass(t *testing.T) {
	res := &cacheOnly{fakeResolver: &fakeResolver{answer: staticAnswer(t, "A 192.0.2.3")}}
	s := startServer(t, testConfig(res))
	s.SetTable(demoTable(t))
	for _, network := range []string{"udp", "tcp"} {
		res.hits.Store(0)
		res.misses.Store(0)
		res.calls.Store(0)
		for _, qname := range []string{"WWW.example.org.", "other.example.org."} {
			if r := exchange(t, network, map[string]string{"udp": udpAddr(s), "tcp": tcpAddr(s)}[network], newQuery(qname, dns.TypeA)); len(r.Answer) != 1 {
				t.Errorf("%s %s: %d answers, want 1", network, qname, len(r.Answer))
			}
		}
		if h, m := res.hits.Load(), res.misses.Load(); h != 1 || m != 1 {
			t.Errorf("%s: cache probes: %d hits, %d misses; want 1 and 1", network, h, m)
		}
		// One call inside the hit's AppendCached, one Resolve for the miss.
		if got := res.calls.Load(); got != 2 {
			t.Errorf("%s: resolver calls = %d, want 2", network, got)
		}
	}
}

// TestUDPReplyAboveReaderBuffer: a UDP reader starts with a small reply
// buffer; a client whose EDNS size allows more still gets the whole
// answer, and again once the reader kept the grown buffer.
func TestUDPReplyAboveReaderBuffer(t *testing.T) {
	s := startServer(t, testConfig(&fakeResolver{}))
	s.SetTable(demoTable(t))
	m := newQuery("huge.demo.svc.cluster.local.", dns.TypeAAAA)
	m.SetEdns0(65000, false)
	pkt, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		reply := rawExchange(t, udpAddr(s), pkt, 2*time.Second)
		if reply == nil {
			t.Fatalf("query %d: no reply", i)
		}
		r := new(dns.Msg)
		if err := r.Unpack(reply); err != nil {
			t.Fatalf("query %d: %v", i, err)
		}
		if len(reply) <= readerReplyBuf || r.Truncated || len(r.Answer) != 250 {
			t.Errorf("query %d: %d bytes, tc=%v, %d answers; want all 250 in more than %d bytes", i, len(reply), r.Truncated, len(r.Answer), readerReplyBuf)
		}
	}
}
