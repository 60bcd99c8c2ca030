package proxy

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/pkg/nametable"
	"github.com/meshdns/meshdns/pkg/policy"
	"github.com/meshdns/meshdns/pkg/proxy/upstream"
)

// recordingResolver is a fakeResolver that notes every name it is asked
// about, in its cache (AppendCached) or upstream (Resolve, Exchange): what
// would leave the pod.
type recordingResolver struct {
	*fakeResolver
	mu    sync.Mutex
	asked []string // guarded by mu
}

func (r *recordingResolver) note(qwire []byte) {
	name, _, _ := dns.UnpackDomainName(qwire, 0)
	r.mu.Lock()
	r.asked = append(r.asked, strings.ToLower(name))
	r.mu.Unlock()
}

func (r *recordingResolver) names() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.asked)
}

func (r *recordingResolver) AppendCached(dst, qwire, key []byte, p *upstream.Probe) ([]byte, upstream.Source, bool) {
	r.note(qwire)
	return r.fakeResolver.AppendCached(dst, qwire, key, p)
}

func (r *recordingResolver) Resolve(ctx context.Context, dst, qwire, key []byte, p *upstream.Probe) ([]byte, upstream.Source, error) {
	r.note(qwire)
	return r.fakeResolver.Resolve(ctx, dst, qwire, key, p)
}

func (r *recordingResolver) Exchange(ctx context.Context, q dns.Question) (*dns.Msg, upstream.Source, error) {
	r.mu.Lock()
	r.asked = append(r.asked, strings.ToLower(q.Name))
	r.mu.Unlock()
	return r.fakeResolver.Exchange(ctx, q)
}

// upstreamWorld answers forwarded questions as the internet would: two
// S3 buckets, one a CNAME into the allowed set, one out of it.
func upstreamWorld(t testing.TB) func(q dns.Question) (*dns.Msg, error) {
	return func(q dns.Question) (*dns.Msg, error) {
		m := new(dns.Msg)
		add := func(s string) { m.Answer = append(m.Answer, mustRR(t, s)) }
		switch strings.ToLower(q.Name) {
		case "inside.s3.amazonaws.com.":
			add("inside.s3.amazonaws.com. 60 IN CNAME b.s3.amazonaws.com.")
			add("b.s3.amazonaws.com. 60 IN A 192.0.2.7")
		case "outside.s3.amazonaws.com.":
			add("outside.s3.amazonaws.com. 60 IN CNAME s3-1-w.amazonaws.com.")
			add("s3-1-w.amazonaws.com. 60 IN A 192.0.2.8")
		case "twice.s3.amazonaws.com.":
			// Off-chain records first, then a chain that leaves on its
			// second link.
			add("unrelated.example. 60 IN CNAME elsewhere.example.")
			add("twice.s3.amazonaws.com. 60 IN CNAME c.s3.amazonaws.com.")
			add("c.s3.amazonaws.com. 60 IN CNAME d.cloudfront.net.")
			add("d.cloudfront.net. 60 IN A 192.0.2.9")
		default:
			if q.Qtype == dns.TypeA {
				add(q.Name + " 60 IN A 192.0.2.1")
			}
		}
		return m, nil
	}
}

// stripePolicy allows api.stripe.com and every S3 bucket, denies
// everything else outside and one table name.
func stripePolicy(t testing.TB, mode policy.Mode, resp policy.Response) *Policy {
	t.Helper()
	p, err := NewPolicy(policy.Config{
		Rules: []policy.Rule{
			{Pattern: "api.stripe.com", Action: policy.Allow},
			{Pattern: "*.s3.amazonaws.com", Action: policy.Allow},
			{Pattern: "big.demo.svc.cluster.local", Action: policy.Deny},
		},
		OutsideDefault: policy.Deny,
		DenyResponse:   resp,
		Mode:           mode,
	}, []string{"demo/egress", "demo/egress", "demo/egress"})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

var podSearch = []string{"demo.svc.cluster.local", "svc.cluster.local", "cluster.local", "corp.example"}

func policyServer(t *testing.T, p *Policy) (*Server, *recordingResolver, *testRegistry) {
	t.Helper()
	res := &recordingResolver{fakeResolver: &fakeResolver{answer: upstreamWorld(t)}}
	cfg := testConfig(res)
	reg := newTestRegistry()
	cfg.Registry, cfg.Search = reg, podSearch
	s := startServer(t, cfg)
	s.SetTablePolicy(demoTable(t), p)
	return s, res, reg
}

func TestPolicyEnforced(t *testing.T) {
	cases := []struct {
		name  string
		qname string
		qtype uint16
		rcode int
		// answer is the first answer record's data, "" for none.
		answer string
		// asked is what reaches the Resolver, nil for nothing.
		asked []string
		// rule is what Explain names: a pattern or a default.
		rule string
	}{
		{name: "allowed exact", qname: "api.stripe.com.", qtype: dns.TypeA, answer: "192.0.2.1",
			asked: []string{"api.stripe.com.", "api.stripe.com."}, rule: "api.stripe.com"},
		{name: "denied by default", qname: "www.stripe.com.", qtype: dns.TypeA, rcode: dns.RcodeNameError, rule: "outside_default"},
		{name: "tunnel label", qname: "aGVsbG8.x1.tunnel.example.", qtype: dns.TypeTXT, rcode: dns.RcodeNameError, rule: "outside_default"},
		// The pod writes its search list: only the name as written can
		// allow a query to leave.
		{name: "expansion of an allowed name", qname: "api.stripe.com.corp.example.", qtype: dns.TypeA, rcode: dns.RcodeNameError,
			rule: "outside_default"},
		{name: "expansion of a denied name", qname: "evil.com.corp.example.", qtype: dns.TypeA, rcode: dns.RcodeNameError, rule: "outside_default"},
		{name: "table name, default", qname: "web.demo.svc.cluster.local.", qtype: dns.TypeA, answer: "10.0.0.1", rule: "table_default"},
		{name: "table NXDOMAIN of an expansion", qname: "api.stripe.com.demo.svc.cluster.local.", qtype: dns.TypeA,
			rcode: dns.RcodeNameError, rule: "table_default"},
		{name: "table name denied by a rule", qname: "big.demo.svc.cluster.local.", qtype: dns.TypeAAAA, rcode: dns.RcodeNameError,
			rule: "big.demo.svc.cluster.local"},
		{name: "wildcard, chain inside", qname: "inside.s3.amazonaws.com.", qtype: dns.TypeA, answer: "b.s3.amazonaws.com.",
			asked: []string{"inside.s3.amazonaws.com.", "inside.s3.amazonaws.com."}, rule: "*.s3.amazonaws.com"},
		{name: "chain leaves", qname: "outside.s3.amazonaws.com.", qtype: dns.TypeA, rcode: dns.RcodeNameError,
			asked: []string{"outside.s3.amazonaws.com.", "outside.s3.amazonaws.com."}, rule: "outside_default"},
		{name: "chain leaves on its second link", qname: "twice.s3.amazonaws.com.", qtype: dns.TypeA, rcode: dns.RcodeNameError,
			asked: []string{"twice.s3.amazonaws.com.", "twice.s3.amazonaws.com."}, rule: "outside_default"},
		{name: "ExternalName to a denied target", qname: "db.demo.svc.cluster.local.", qtype: dns.TypeA, rcode: dns.RcodeNameError,
			rule: "outside_default"},
	}
	s, res, reg := policyServer(t, stripePolicy(t, policy.Enforce, policy.NXDOMAIN))
	// The real table answers such an expansion from its zone.
	s.h.SetTablePolicy(withNXDomain(demoTable(t), "api.stripe.com.demo.svc.cluster.local."), s.h.Policy())
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := len(res.names())
			r := exchange(t, "udp", udpAddr(s), newQuery(tc.qname, tc.qtype))
			if r.Rcode != tc.rcode {
				t.Errorf("rcode %s, want %s", dns.RcodeToString[r.Rcode], dns.RcodeToString[tc.rcode])
			}
			var got []string
			for _, rr := range r.Answer {
				got = append(got, strings.Fields(rr.String())[4])
			}
			if tc.answer != "" && !slices.Contains(got, tc.answer) || tc.answer == "" && len(got) > 0 {
				t.Errorf("answer %q, want %q", got, tc.answer)
			}
			if diff := cmp.Diff(tc.asked, res.names()[before:], cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("names asked of the resolver (-want +got):\n%s", diff)
			}
			_, _, v, err := s.Handler().ExplainPolicy(t.Context(), dns.Question{Name: tc.qname, Qtype: tc.qtype, Qclass: dns.ClassINET})
			if err != nil {
				t.Fatal(err)
			}
			if rule := v.Rule + v.Default; rule != tc.rule || !v.Judged {
				t.Errorf("Explain: rule %q (judged %v), want %q", rule, v.Judged, tc.rule)
			}
		})
	}
	// Each case was asked twice: once over UDP, once by Explain.
	var allowed, denied int
	for _, tc := range cases {
		if tc.rcode == 0 || tc.qname == "api.stripe.com.demo.svc.cluster.local." {
			allowed += 2
		} else {
			denied += 2
		}
	}
	if got := reg.value(t, "meshdns_policy_decisions_total", "allow", "enforce"); got != float64(allowed) {
		t.Errorf("allow decisions %v, want %d", got, allowed)
	}
	if got := reg.value(t, "meshdns_policy_decisions_total", "deny", "enforce"); got != float64(denied) {
		t.Errorf("deny decisions %v, want %d", got, denied)
	}
}

// withNXDomain adds an authoritative NXDOMAIN for name to a fake table.
func withNXDomain(f *fakeTable, name string) *fakeTable {
	f.results[name+"/A"] = nametable.Result{Action: nametable.Answer, Rcode: dns.RcodeNameError}
	return f
}

// A policy answering REFUSED still answers NXDOMAIN under a search
// domain, so musl's walk goes on to the name as written.
func TestPolicyRefused(t *testing.T) {
	s, res, _ := policyServer(t, stripePolicy(t, policy.Enforce, policy.Refused))
	for _, tc := range []struct {
		qname string
		rcode int
	}{
		{qname: "evil.com.", rcode: dns.RcodeRefused},
		{qname: "evil.com.corp.example.", rcode: dns.RcodeNameError},
	} {
		if r := exchange(t, "udp", udpAddr(s), newQuery(tc.qname, dns.TypeA)); r.Rcode != tc.rcode {
			t.Errorf("%s: rcode %s, want %s", tc.qname, dns.RcodeToString[r.Rcode], dns.RcodeToString[tc.rcode])
		}
	}
	if n := res.names(); len(n) != 0 {
		t.Errorf("denied names reached the resolver: %v", n)
	}
}

// Audit mode answers every name as if allowed, and counts and logs the
// denials with the rule that decided.
func TestPolicyAudit(t *testing.T) {
	res := &recordingResolver{fakeResolver: &fakeResolver{answer: upstreamWorld(t)}}
	cfg := testConfig(res)
	reg := newTestRegistry()
	out := &syncBuffer{}
	cfg.Registry, cfg.Search = reg, podSearch
	cfg.QueryLogger = slog.New(slog.NewJSONHandler(out, nil)).With("pod", "web-0")
	cfg.QueryLog = QueryLogConfig{Classes: LogDenied}
	s := startServer(t, cfg)
	s.SetTablePolicy(demoTable(t), stripePolicy(t, policy.Audit, policy.NXDOMAIN))
	for _, q := range []string{"www.stripe.com.", "outside.s3.amazonaws.com.", "api.stripe.com."} {
		if r := exchange(t, "udp", udpAddr(s), newQuery(q, dns.TypeA)); r.Rcode != dns.RcodeSuccess || len(r.Answer) == 0 {
			t.Errorf("%s: %s with %d answers, want NOERROR with answers", q, dns.RcodeToString[r.Rcode], len(r.Answer))
		}
	}
	if got := reg.value(t, "meshdns_policy_decisions_total", "deny", "audit"); got != 2 {
		t.Errorf("audited denials %v, want 2", got)
	}
	if got := reg.value(t, "meshdns_policy_decisions_total", "allow", "audit"); got != 1 {
		t.Errorf("audited allows %v, want 1", got)
	}
	var got []string
	for _, l := range out.lines(t) {
		got = append(got, fmt.Sprintf("%v %v %v %v %v %v %v", l["pod"], l["qname"], l["rcode"], l["action"], l["mode"], l["rule"], l["cname"]))
	}
	want := []string{
		"web-0 www.stripe.com. NOERROR deny audit outside_default <nil>",
		"web-0 outside.s3.amazonaws.com. NOERROR deny audit outside_default s3-1-w.amazonaws.com.",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("denial lines (-want +got):\n%s", diff)
	}
}

// A denied name is never answered from the Resolver's cache nor probed
// there, and an allowed one whose cached chain leaves is denied on the
// hit.
func TestPolicyCache(t *testing.T) {
	res := &cacheOnly{fakeResolver: &fakeResolver{answer: staticAnswer(t, "A 192.0.2.3")}}
	s := startServer(t, testConfig(res))
	p, err := NewPolicy(policy.Config{Rules: []policy.Rule{{Pattern: "www.example.org", Action: policy.Deny}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.SetTablePolicy(demoTable(t), p)
	if r := exchange(t, "udp", udpAddr(s), newQuery("www.example.org.", dns.TypeA)); r.Rcode != dns.RcodeNameError {
		t.Errorf("rcode %s, want NXDOMAIN", dns.RcodeToString[r.Rcode])
	}
	if h, m := res.hits.Load(), res.misses.Load(); h+m != 0 {
		t.Errorf("cache probed %d times for a denied name", h+m)
	}
	s.SetTablePolicy(demoTable(t), nil)
	if r := exchange(t, "udp", udpAddr(s), newQuery("www.example.org.", dns.TypeA)); r.Rcode != dns.RcodeSuccess || res.hits.Load() != 1 {
		t.Errorf("without policy: rcode %s, %d hits; want NOERROR from the cache", dns.RcodeToString[r.Rcode], res.hits.Load())
	}
}

// SetTablePolicy swaps the table and the policy in one store: under
// concurrent queries no answer comes from one version's table under
// another version's policy.
func TestPolicySwapAtomic(t *testing.T) {
	h, err := NewHandler(testConfig(&fakeResolver{}))
	if err != nil {
		t.Fatal(err)
	}
	table := func(addr string) *fakeTable {
		return &fakeTable{results: map[string]nametable.Result{
			"a.demo.svc.cluster.local./A": {Action: nametable.Answer, Answer: mustRRs(t, "x. 30 IN A "+addr)},
		}}
	}
	deny, err := NewPolicy(policy.Config{
		Rules: []policy.Rule{{Pattern: "a.demo.svc.cluster.local", Action: policy.Deny}}, DenyResponse: policy.Refused}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Odd versions allow a (10.0.0.1); even versions deny it, and their
	// table says 10.0.0.2, which must never be answered.
	h.SetTablePolicy(table("10.0.0.1"), nil)
	pkt, err := newQuery("a.demo.svc.cluster.local.", dns.TypeA).Pack()
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var bad sync.Map
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				m := new(dns.Msg)
				if err := m.Unpack(h.Serve(context.Background(), nil, pkt, UDP)); err != nil {
					bad.Store(err.Error(), true)
					continue
				}
				if m.Rcode == dns.RcodeSuccess && m.Answer[0].(*dns.A).A.String() != "10.0.0.1" {
					bad.Store(m.Answer[0].String(), true)
				}
			}
		})
	}
	for i := range 2000 {
		if i%2 == 0 {
			h.SetTablePolicy(table("10.0.0.2"), deny)
		} else {
			h.SetTablePolicy(table("10.0.0.1"), nil)
		}
	}
	close(stop)
	wg.Wait()
	bad.Range(func(k, _ any) bool {
		t.Errorf("answer from a table under another version's policy: %v", k)
		return true
	})
}

// Judged table answers and cache hits allocate nothing, with 1,000
// rules.
func TestPolicyAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under -race")
	}
	h, err := NewHandler(Config{Resolver: newCachedResolver(t), Search: podSearch})
	if err != nil {
		t.Fatal(err)
	}
	h.SetTablePolicy(demoTable(t), thousandRules(t))
	// A denial under a search domain (answered NXDOMAIN by the proxy)
	// costs nothing more.
	questions := slices.Clone(benchQuestions)
	questions = append(questions, questions[0])
	questions[len(questions)-1].name, questions[len(questions)-1].qname = "denied_expansion", "tunnel.zone1.example.net.corp.example."
	for _, bq := range questions {
		t.Run(bq.name, func(t *testing.T) {
			pkt, err := newQuery(bq.qname, bq.qtype).Pack()
			if err != nil {
				t.Fatal(err)
			}
			dst := make([]byte, 0, 4096)
			ctx := context.Background()
			if got := testing.AllocsPerRun(200, func() { h.Serve(ctx, dst, pkt, UDP) }); got != 0 {
				t.Errorf("%v allocs per query, want 0", got)
			}
		})
	}
}

// thousandRules is a policy of 1,000 rules (500 exact, 500 wildcards)
// that allows the benchmark's names.
func thousandRules(t testing.TB) *Policy {
	rules := []policy.Rule{{Pattern: "*.example.org", Action: policy.Allow}}
	for i := range 999 {
		pat := fmt.Sprintf("host%d.vendor%d.example.com", i, i%37)
		if i%2 == 1 {
			pat = fmt.Sprintf("*.zone%d.example.net", i)
		}
		rules = append(rules, policy.Rule{Pattern: pat, Action: policy.Allow})
	}
	p, err := NewPolicy(policy.Config{Rules: rules, OutsideDefault: policy.Deny}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// missResolver is cachedResolver with every cache probe missing: each
// query takes the forwarding path (Resolve), as a query sent upstream.
type missResolver struct{ *cachedResolver }

func (m missResolver) AppendCached(dst, _, _ []byte, _ *upstream.Probe) ([]byte, upstream.Source, bool) {
	return dst, upstream.SourceUpstream, false
}

func (m missResolver) Resolve(_ context.Context, dst, qwire, key []byte, p *upstream.Probe) ([]byte, upstream.Source, error) {
	out, _, _ := m.cachedResolver.AppendCached(dst, qwire, key, p)
	return out, upstream.SourceUpstream, nil
}

// BenchmarkPolicy compares a query without a policy and under one of
// 1,000 rules, for a table answer, a cache hit and a forwarded query
// (the handler's share: the upstream is a stored reply).
func BenchmarkPolicy(b *testing.B) {
	for _, path := range []struct {
		name  string
		qname string
		res   Resolver
	}{
		{name: "table", qname: "web.demo.svc.cluster.local.", res: newCachedResolver(b)},
		{name: "cache_hit", qname: "www.example.org.", res: newCachedResolver(b)},
		{name: "forwarded", qname: "www.example.org.", res: missResolver{newCachedResolver(b)}},
	} {
		for _, pol := range []struct {
			name string
			p    *Policy
		}{{"none", nil}, {"rules_1000", thousandRules(b)}} {
			b.Run(path.name+"/"+pol.name, func(b *testing.B) {
				h, err := NewHandler(Config{Resolver: path.res, Search: podSearch})
				if err != nil {
					b.Fatal(err)
				}
				setBenchTiming(h)
				h.SetTablePolicy(demoTable(b), pol.p)
				pkt, err := newQuery(path.qname, dns.TypeA).Pack()
				if err != nil {
					b.Fatal(err)
				}
				dst := make([]byte, 0, 4096)
				ctx := context.Background()
				b.ReportAllocs()
				for b.Loop() {
					h.Serve(ctx, dst, pkt, UDP)
				}
			})
		}
	}
}

// A policy whose rules stay out of the cluster domain allows its table
// names without a decision; any rule that could match one turns that off,
// and the answers are the same either way.
func TestPolicyZoneAllowed(t *testing.T) {
	cases := []struct {
		name  string
		rules []string // denied patterns
		table policy.Action
		want  bool
	}{
		{name: "outside names only", rules: []string{"evil.com", "*.evil.com"}, want: true},
		{name: "no rules", want: true},
		{name: "table default denies", table: policy.Deny, want: false},
		{name: "exact name in the zone", rules: []string{"web.demo.svc.cluster.local"}, want: false},
		{name: "wildcard in the zone", rules: []string{"*.demo.svc.cluster.local"}, want: false},
		{name: "the zone itself", rules: []string{"Cluster.Local."}, want: false},
		{name: "wildcard above the zone", rules: []string{"*.local"}, want: false},
		{name: "a name merely ending alike", rules: []string{"*.xcluster.local", "notcluster.local"}, want: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var rules []policy.Rule
			for _, r := range tc.rules {
				rules = append(rules, policy.Rule{Pattern: r, Action: policy.Deny})
			}
			p, err := NewPolicy(policy.Config{Rules: rules, TableDefault: tc.table}, nil)
			if err != nil {
				t.Fatal(err)
			}
			h, err := NewHandler(testConfig(&fakeResolver{}))
			if err != nil {
				t.Fatal(err)
			}
			if got := h.zoneAllowed(p); got != tc.want {
				t.Errorf("zoneAllowed = %v, want %v", got, tc.want)
			}
			// Whichever path judged it, the table's answer is what the
			// policy says of the name.
			h.SetTablePolicy(demoTable(t), p)
			pkt, err := newQuery("web.demo.svc.cluster.local.", dns.TypeA).Pack()
			if err != nil {
				t.Fatal(err)
			}
			m := new(dns.Msg)
			if err := m.Unpack(h.Serve(t.Context(), nil, pkt, UDP)); err != nil {
				t.Fatal(err)
			}
			d := p.p.DecideSearch("web.demo.svc.cluster.local.", true, nil)
			wantRcode := dns.RcodeSuccess
			if d.Blocks() {
				wantRcode = int(d.Rcode)
			}
			if m.Rcode != wantRcode {
				t.Errorf("rcode %s, want %s", dns.RcodeToString[m.Rcode], dns.RcodeToString[wantRcode])
			}
		})
	}
}
