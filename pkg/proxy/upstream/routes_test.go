package upstream

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"
)

func TestNewRoutesRejects(t *testing.T) {
	for _, tc := range []struct {
		name   string
		routes []Route
	}{
		{name: "no upstreams", routes: []Route{{Domains: []string{"corp.example"}}}},
		{name: "no domains", routes: []Route{{Upstreams: []string{"10.0.0.1"}}}},
		{name: "bad upstream", routes: []Route{{Domains: []string{"corp.example"}, Upstreams: []string{"dns.corp:53"}}}},
		{name: "bad domain", routes: []Route{{Domains: []string{"corp..example"}, Upstreams: []string{"10.0.0.1"}}}},
		{name: "domain twice", routes: []Route{
			{Domains: []string{"corp.example"}, Upstreams: []string{"10.0.0.1"}},
			{Domains: []string{"Corp.Example."}, Upstreams: []string{"10.0.0.2"}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := NewRoutes(tc.routes); !errors.Is(err, ErrBadRoute) {
				t.Errorf("NewRoutes: %v, want ErrBadRoute", err)
			}
		})
	}
}

// answerA answers every question with one A record.
func answerA(t testing.TB, ip string) func(dns.ResponseWriter, *dns.Msg) {
	return answerWith(t, dns.RcodeSuccess, []string{"$QNAME 300 IN A " + ip}, nil)
}

func addrOf(t testing.TB, m *dns.Msg) string {
	t.Helper()
	if len(m.Answer) != 1 {
		t.Fatalf("answer %v, want one A", m.Answer)
	}
	return m.Answer[0].(*dns.A).A.String()
}

// TestRoutes: names under a route's domains go to its upstreams, the
// longest domain winning; everything else to the Resolver's own. A change
// of routes drops the cached replies of the names it moves and keeps the
// others.
func TestRoutes(t *testing.T) {
	def := newServer(t, answerA(t, "192.0.2.1"))
	corp := newServer(t, answerA(t, "192.0.2.2"))
	eu := newServer(t, answerA(t, "192.0.2.3"))
	r, _ := newTestResolver(t, Config{Upstreams: []string{def.Addr}, Timeout: time.Minute}) // no second tries on a loaded machine
	rt, err := NewRoutes([]Route{
		{Domains: []string{"corp.example", "corp.test."}, Upstreams: []string{corp.Addr}},
		{Domains: []string{"EU.corp.example"}, Upstreams: []string{eu.Addr}},
	})
	if err != nil {
		t.Fatal(err)
	}
	r.SetRoutes(rt)
	got := map[string]string{}
	for _, name := range []string{"corp.example.", "A.Corp.Example.", "b.corp.test.", "x.eu.corp.example.", "eu.corp.example.", "example.org.", "notcorp.example."} {
		m, _ := ask(t, r, name, dns.TypeA)
		got[name] = addrOf(t, m)
	}
	want := map[string]string{
		"corp.example.": "192.0.2.2", "A.Corp.Example.": "192.0.2.2", "b.corp.test.": "192.0.2.2",
		"x.eu.corp.example.": "192.0.2.3", "eu.corp.example.": "192.0.2.3",
		"example.org.": "192.0.2.1", "notcorp.example.": "192.0.2.1",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("answers (-want +got):\n%s", diff)
	}

	// corp.test moves to the default upstreams, eu.corp.example stays.
	rt2, err := NewRoutes([]Route{
		{Domains: []string{"corp.example"}, Upstreams: []string{corp.Addr}},
		{Domains: []string{"eu.corp.example"}, Upstreams: []string{eu.Addr}},
	})
	if err != nil {
		t.Fatal(err)
	}
	euBefore, defBefore := eu.Queries.Load(), def.Queries.Load()
	r.SetRoutes(rt2)
	if m, src := ask(t, r, "b.corp.test.", dns.TypeA); addrOf(t, m) != "192.0.2.1" || src != SourceUpstream {
		t.Errorf("b.corp.test. after its route went: %s from %v, want 192.0.2.1 from upstream", addrOf(t, m), src)
	}
	if m, src := ask(t, r, "x.eu.corp.example.", dns.TypeA); addrOf(t, m) != "192.0.2.3" || src != SourceCache {
		t.Errorf("x.eu.corp.example. (route unchanged): %s from %v, want 192.0.2.3 from cache", addrOf(t, m), src)
	}
	if _, src := ask(t, r, "example.org.", dns.TypeA); src != SourceCache {
		t.Errorf("example.org. (no route): from %v, want cache", src)
	}
	if n := eu.Queries.Load() - euBefore; n != 0 {
		t.Errorf("eu upstream asked %d times after an unrelated change, want 0", n)
	}
	if n := def.Queries.Load() - defBefore; n != 1 {
		t.Errorf("default upstream asked %d times, want 1 (b.corp.test.)", n)
	}

	// No routes: everything to the default upstreams.
	r.SetRoutes(nil)
	if m, _ := ask(t, r, "a.corp.example.", dns.TypeA); addrOf(t, m) != "192.0.2.1" {
		t.Errorf("a.corp.example. without routes: %s, want 192.0.2.1", addrOf(t, m))
	}
	if diff := cmp.Diff([]string{def.Addr}, r.RouteOf("x.eu.corp.example")); diff != "" {
		t.Errorf("RouteOf (-want +got):\n%s", diff)
	}
}

// TestRouteRoot: a route for "." takes every name, as CoreDNS's
// "forward ." does.
func TestRouteRoot(t *testing.T) {
	def := newServer(t, answerA(t, "192.0.2.1"))
	other := newServer(t, answerA(t, "192.0.2.9"))
	r, _ := newTestResolver(t, Config{Upstreams: []string{def.Addr}, Timeout: time.Minute}) // no second tries on a loaded machine
	rt, err := NewRoutes([]Route{{Domains: []string{"."}, Upstreams: []string{other.Addr}}})
	if err != nil {
		t.Fatal(err)
	}
	r.SetRoutes(rt)
	if m, _ := ask(t, r, "example.org.", dns.TypeA); addrOf(t, m) != "192.0.2.9" {
		t.Errorf("answer %s, want 192.0.2.9", addrOf(t, m))
	}
}
