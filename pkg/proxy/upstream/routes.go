package upstream

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/internal/dnsname"
)

// Route sends the names at and under Domains to Upstreams instead of the
// Resolver's own upstreams (a stub domain, CoreDNS's "forward corp.example
// 10.0.0.53").
type Route struct {
	// Domains are names (any case, trailing dot optional); "." is every
	// name.
	Domains []string
	// Upstreams are as Config.Upstreams takes them (ParseAddr).
	Upstreams []string
}

// Routes is a checked set of Route, ready for SetRoutes. The zero value
// and nil route nothing.
type Routes struct {
	// byDomain maps a domain in lowercase wire form to its upstreams.
	byDomain map[string][]Addr
}

// ErrBadRoute wraps every reason NewRoutes refuses a set of routes.
var ErrBadRoute = errors.New("bad forwarding rule")

// NewRoutes checks routes: every domain a valid name given once, every
// route with at least one upstream ParseAddr takes. When routes overlap
// the longest domain wins (corp.example and eu.corp.example: a name under
// eu.corp.example goes to the second).
func NewRoutes(routes []Route) (*Routes, error) {
	rt := &Routes{byDomain: make(map[string][]Addr)}
	for i, r := range routes {
		if len(r.Domains) == 0 || len(r.Upstreams) == 0 {
			return nil, fmt.Errorf("%w %d: needs domains and upstreams", ErrBadRoute, i)
		}
		addrs := make([]Addr, 0, len(r.Upstreams))
		for _, u := range r.Upstreams {
			a, err := ParseAddr(u)
			if err != nil {
				return nil, fmt.Errorf("%w %d: %w", ErrBadRoute, i, err)
			}
			addrs = append(addrs, a)
		}
		for _, d := range r.Domains {
			d = strings.ToLower(strings.TrimSuffix(d, "."))
			if d != "" {
				if err := dnsname.Check(d, false); err != nil {
					return nil, fmt.Errorf("%w %d: domain %q: %w", ErrBadRoute, i, d, err)
				}
			}
			key := wireName(d)
			if _, dup := rt.byDomain[key]; dup {
				return nil, fmt.Errorf("%w %d: domain %q given twice", ErrBadRoute, i, d+".")
			}
			rt.byDomain[key] = addrs
		}
	}
	return rt, nil
}

// wireName is the uncompressed wire form of d (lowercase, no trailing
// dot; "" is the root), the form a question key starts with.
func wireName(d string) string {
	b := make([]byte, 0, len(d)+2)
	if d != "" {
		for l := range strings.SplitSeq(d, ".") {
			b = append(b, byte(len(l)))
			b = append(b, l...)
		}
	}
	return string(append(b, 0))
}

// route is one domain's upstreams, resolved for forward.
type route struct {
	ups      []*upstream
	attempts int
}

// routeTable is what forward consults; swapped whole by SetRoutes.
type routeTable struct {
	from     *Routes           // or nil
	byDomain map[string]*route // lowercase wire-form domain
	// gen counts the tables set; a reply forwarded under an older one
	// is not cached (its route may have changed meanwhile).
	gen uint64
}

// routeFor returns the route of the question key q whose name is its
// first nameLen bytes: the longest domain the name is at or under, or nil
// for the Resolver's own upstreams.
func (t *routeTable) routeFor(q []byte, nameLen int) *route {
	if t == nil || len(t.byDomain) == 0 {
		return nil
	}
	for off := 0; off < nameLen; off += 1 + int(q[off]) {
		if rt, ok := t.byDomain[string(q[off:nameLen])]; ok {
			return rt
		}
	}
	return nil
}

// SetRoutes makes rt the Resolver's routes (nil: none), for the next
// query on. Cached replies of names whose route changed are dropped, so no
// reply of the previous upstreams is served for them; replies to queries
// in flight meanwhile are answered, not cached.
func (r *Resolver) SetRoutes(rt *Routes) {
	r.routesMu.Lock()
	defer r.routesMu.Unlock()
	old := r.routes.Load()
	if old.from == rt {
		return
	}
	next := &routeTable{from: rt, byDomain: map[string]*route{}, gen: old.gen + 1}
	if rt != nil {
		for key, addrs := range rt.byDomain {
			ro := &route{attempts: max(len(addrs), 2)}
			for _, a := range addrs {
				ro.ups = append(ro.ups, r.upstreamFor(a))
			}
			next.byDomain[key] = ro
		}
	}
	var changed []string
	for key, ro := range next.byDomain {
		if o, ok := old.byDomain[key]; !ok || !slices.Equal(o.ups, ro.ups) {
			changed = append(changed, key)
		}
	}
	for key := range old.byDomain {
		if _, ok := next.byDomain[key]; !ok {
			changed = append(changed, key)
		}
	}
	r.routes.Store(next)
	if r.cache == nil || len(changed) == 0 {
		return
	}
	n := r.cache.DeleteFunc(func(k string) bool {
		name := k[:len(k)-4]
		return slices.ContainsFunc(changed, func(d string) bool { return underWire(name, d) })
	})
	r.log.Info("forwarding rules changed", "domains", len(changed), "dropped", n)
}

// underWire reports whether the wire name is d or a name under it, both
// lowercase wire form.
func underWire(name, d string) bool {
	for off := 0; off < len(name); off += 1 + int(name[off]) {
		if name[off:] == d {
			return true
		}
	}
	return false
}

// upstreamFor returns the upstream for a, made once per address and kept:
// its metrics and DNS-over-TLS connections outlive the rule that named it
// (idle connections close themselves). Called with routesMu held.
func (r *Resolver) upstreamFor(a Addr) *upstream {
	for _, up := range r.ups {
		if up.addr == a.String() {
			return up
		}
	}
	if up, ok := r.routeUps[a.String()]; ok {
		return up
	}
	up := r.newUpstream(a)
	r.routeUps[a.String()] = up
	return up
}

// RouteOf returns the upstreams a name goes to under the routes in force
// (the Resolver's own when no route covers it), for /debug and tests.
func (r *Resolver) RouteOf(name string) []string {
	q, err := questionWire(dns.Question{Name: dns.Fqdn(strings.ToLower(name)), Qtype: dns.TypeA, Qclass: dns.ClassINET})
	if err != nil {
		return nil
	}
	ups := r.ups
	if ro := r.routes.Load().routeFor(q, len(q)-4); ro != nil {
		ups = ro.ups
	}
	out := make([]string, len(ups))
	for i, up := range ups {
		out[i] = up.addr
	}
	return out
}
