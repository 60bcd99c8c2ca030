package nametable

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"
)

// The property Patch must have: for any table and any patch, the patched
// table answers every question exactly as New answers it for the entries
// that result, or both refuse. The tables are drawn from a small world of
// names so that patches collide with what is there: Kubernetes services
// (with ports, alternate names, headless endpoints, ExternalNames), file
// entries and their children (empty non-terminals that come and go),
// wildcards, alt hosts, zone apexes and dns-version taken over, entries
// named like reverse names, addresses shared by several names.

// patchPool is the hostnames a random table draws from.
var patchPool = func() []string {
	var out []string
	for i := range 5 {
		for _, ns := range []string{"ns1", "ns2"} {
			out = append(out, fmt.Sprintf("s%d.%s.svc.cluster.local", i, ns))
		}
	}
	out = append(out,
		"s0.ns1.svc.other.local", "s1.ns1.svc.other.local",
		"h0.example.com", "h1.example.com", "x.h0.example.com", "y.x.h0.example.com",
		"d.e.f.example.com", "e.f.example.com", "h0.a.example.com", "b.c.a.example.com",
		"host0.corp.internal", "host1.corp.internal",
		"example.com", "a.example.com", "cluster.local",
		"dns-version.cluster.local", "x.dns-version.cluster.local",
		"1.0.0.10.in-addr.arpa", "2.0.0.10.in-addr.arpa", "0.10.in-addr.arpa",
		"*.w.example.com", "*.example.com", "*.v.w.example.com", "*.h0.example.com", "*.q.cluster.local",
		"a.s0.ns1.svc.cluster.local", "alt0.example.com",
	)
	return out
}()

var patchIPs = addrs("10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.1.4", "fd00::1", "fd00::2", "192.168.0.1", "::ffff:10.0.0.2")

var patchZoneSets = [][]string{
	nil,
	{"cluster.local"},
	{"cluster.local", "example.com"},
	{"cluster.local", "example.com", "a.example.com", "10.in-addr.arpa"},
	{"cluster.local", "in-addr.arpa", "ip6.arpa", "c.a.example.com"},
	{"local", "com", "arpa"},
}

// patchWorld draws random entries.
type patchWorld struct {
	r     *rand.Rand
	zones []string
	pod   Context
}

func newPatchWorld(r *rand.Rand) *patchWorld {
	w := &patchWorld{r: r, zones: patchZoneSets[r.IntN(len(patchZoneSets))]}
	w.pod = Context{
		Namespace: "ns1", TTL: uint32(r.IntN(3)) * 10, Serial: uint32(r.IntN(3)),
		Search: []string{"ns1.svc.cluster.local", "svc.cluster.local", "cluster.local", "example.com", "corp.internal"},
	}
	return w
}

func (w *patchWorld) ips(max int) []netip.Addr {
	var out []netip.Addr
	for range w.r.IntN(max + 1) {
		out = append(out, patchIPs[w.r.IntN(len(patchIPs))])
	}
	return out
}

// entry draws content for name.
func (w *patchWorld) entry(name string) Entry {
	r := w.r
	e := Entry{Hostname: name, Registry: "File"}
	if r.IntN(4) == 0 {
		e.TTL = uint32(r.IntN(3)) * 7
	}
	if strings.HasPrefix(name, "*.") {
		if r.IntN(3) == 0 {
			e.CanonicalName = patchPool[r.IntN(len(patchPool))]
			e.CanonicalName = strings.TrimPrefix(e.CanonicalName, "*.")
		} else {
			e.IPs = w.ips(2)
		}
		return e
	}
	if host, rest, ok := strings.Cut(name, "."); ok {
		if ns, _, ok := strings.Cut(rest, ".svc."); ok && !strings.Contains(ns, ".") {
			e.Registry, e.ShortName, e.Namespace = "Kubernetes", host, ns
			if r.IntN(4) == 0 {
				e.ShortName = strings.ToUpper(host)
			}
		}
	}
	if r.IntN(6) == 0 {
		alts := []string{"alt0.example.com", "alt1.corp.internal", "*.alt2.example.com", "h1.example.com", name}
		for range 1 + r.IntN(2) {
			e.AltHosts = append(e.AltHosts, alts[r.IntN(len(alts))])
		}
	}
	switch r.IntN(8) {
	case 0:
		targets := append(slices.Clone(patchPool), "ext.example.org", "nx.example.com", "nx.cluster.local")
		e.CanonicalName = strings.TrimPrefix(targets[r.IntN(len(targets))], "*.")
		return e
	case 1, 2:
		for range r.IntN(4) {
			ep := Endpoint{IPs: w.ips(2)}
			if h := []string{"a", "b", "", "A"}[r.IntN(4)]; h != "" {
				ep.Hostname = h
				if len(ep.IPs) == 0 {
					ep.IPs = w.ips(1)
					if len(ep.IPs) == 0 {
						ep.IPs = patchIPs[:1]
					}
				}
			} else if len(ep.IPs) == 0 {
				ep.IPs = patchIPs[1:2]
			}
			e.Endpoints = append(e.Endpoints, ep)
		}
		if r.IntN(3) == 0 {
			e.IPs = w.ips(1)
		}
	default:
		e.IPs = w.ips(3)
	}
	if r.IntN(2) == 0 {
		ports := []Port{{Name: "http", Port: 80, Protocol: "TCP"}, {Name: "dns", Port: 53, Protocol: "UDP"}, {Port: 9090}, {Name: "http", Port: 8080, Protocol: "tcp"}}
		for range 1 + r.IntN(3) {
			e.Ports = append(e.Ports, ports[r.IntN(len(ports))])
		}
	}
	return e
}

// table draws a table's entries: a random part of the pool.
func (w *patchWorld) table() []Entry {
	var out []Entry
	for _, name := range patchPool {
		if w.r.IntN(5) < 2 {
			out = append(out, w.entry(name))
		}
	}
	w.r.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// patch draws a patch of entries: some removed, some replaced, some added;
// result is what New gets: the entries kept, in their order, then add.
func (w *patchWorld) patch(entries []Entry) (remove, add, result []Entry) {
	have := make(map[string]bool)
	for _, e := range entries {
		have[e.Hostname] = true
		switch w.r.IntN(6) {
		case 0:
			remove = append(remove, e)
		case 1:
			remove = append(remove, e)
			add = append(add, w.entry(e.Hostname))
		default:
			result = append(result, e)
		}
	}
	for _, name := range patchPool {
		if !have[name] && w.r.IntN(5) == 0 {
			add = append(add, w.entry(name))
		}
	}
	w.r.Shuffle(len(add), func(i, j int) { add[i], add[j] = add[j], add[i] })
	w.r.Shuffle(len(remove), func(i, j int) { remove[i], remove[j] = remove[j], remove[i] })
	return remove, add, append(result, add...)
}

var patchQtypes = []uint16{dns.TypeA, dns.TypeAAAA, dns.TypeSRV, dns.TypePTR, dns.TypeTXT, dns.TypeSOA, dns.TypeCNAME, dns.TypeANY, dns.TypeMX}

// patchQuestions is every name worth asking both tables.
func patchQuestions(tables ...*Table) []string {
	set := make(map[string]bool)
	add := func(n string) {
		for ; n != ""; n = parent(n) {
			set[n] = true
		}
	}
	for _, t := range tables {
		for _, n := range t.Names() {
			add(strings.TrimPrefix(n, "*."))
			for _, a := range t.AlternateNames(n) {
				set[a] = true
			}
			set["zz."+n] = true
			set["_http._tcp."+n] = true
			set["_tcp."+n] = true
			set["_dns._udp."+n] = true
			set[n+".ns1.svc.cluster.local"] = true
			set[n+".example.com"] = true
			set[n+".corp.internal"] = true
		}
	}
	for _, n := range patchPool {
		n = strings.TrimPrefix(n, "*.")
		add(n)
		for _, p := range []string{"a.", "b.", "10-0-0-1.", "fd00--1.", "q.", "_http._tcp.", "_tcp.", "_udp."} {
			set[p+n] = true
		}
		if host, rest, ok := strings.Cut(n, "."); ok {
			set[host] = true
			if ns, _, ok := strings.Cut(rest, "."); ok {
				set[host+"."+ns] = true
				set[host+"."+ns+".svc"] = true
				set["_http._tcp."+host+"."+ns] = true
			}
		}
	}
	for _, a := range patchIPs {
		add(strings.TrimSuffix(reverseName(a.Unmap()), "."))
	}
	for _, n := range []string{"google.com", "q.w.example.com", "z.v.w.example.com", "p.q.cluster.local", "10-0-0-1.ns1.pod.cluster.local"} {
		add(n)
	}
	out := make([]string, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// sameTable fails unless got answers every question as want does.
func sameTable(t *testing.T, want, got *Table, r *rand.Rand) {
	t.Helper()
	if w, g := want.Len(), got.Len(); w != g {
		t.Errorf("Len: want %d, got %d", w, g)
	}
	if diff := cmp.Diff(want.Names(), got.Names()); diff != "" {
		t.Errorf("Names (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want.Zones(), got.Zones()); diff != "" {
		t.Errorf("Zones (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want.Context(), got.Context()); diff != "" {
		t.Errorf("Context (-want +got):\n%s", diff)
	}
	for _, n := range want.Names() {
		if diff := cmp.Diff(want.AlternateNames(n), got.AlternateNames(n)); diff != "" {
			t.Errorf("AlternateNames(%s) (-want +got):\n%s", n, diff)
		}
	}
	failed := 0
	strs := make(map[dns.RR]string)
	for _, name := range patchQuestions(want, got) {
		for _, qt := range patchQtypes {
			qname := name + "."
			if r.IntN(4) == 0 {
				qname = asciiCase(qname, r.Uint64())
			}
			q := dns.Question{Name: qname, Qtype: qt, Qclass: dns.ClassINET}
			wr, gr := want.Lookup(q), got.Lookup(q)
			if sameNs(wr.Ns, gr.Ns, strs) {
				// Negative answers are most of them: skip printing
				// the SOA for each.
				wr.Ns, gr.Ns = nil, nil
			}
			w, g := viewOf(wr, qname), viewOf(gr, qname)
			if sameView(w, g) {
				continue
			}
			w, g = viewOf(want.Lookup(q), qname), viewOf(got.Lookup(q), qname)
			if diff := cmp.Diff(w, g); diff != "" {
				t.Errorf("Lookup(%s %s) (-New +Patch):\n%s", qname, dns.TypeToString[qt], diff)
				if failed++; failed > 5 {
					t.FailNow()
				}
			}
		}
	}
}

// sameNs reports whether a and b print the same, remembering what each
// record printed (records in tables are never changed).
func sameNs(a, b []dns.RR, strs map[dns.RR]string) bool {
	if len(a) != len(b) {
		return false
	}
	str := func(rr dns.RR) string {
		s, ok := strs[rr]
		if !ok {
			s = rr.String()
			strs[rr] = s
		}
		return s
	}
	for i := range a {
		if str(a[i]) != str(b[i]) {
			return false
		}
	}
	return true
}

// sameView is cmp.Equal for views, at a fraction of its cost.
func sameView(a, b view) bool {
	return a.Action == b.Action && a.Rcode == b.Rcode && a.Alias == b.Alias && a.Chase == b.Chase &&
		slices.Equal(a.Answer, b.Answer) && slices.Equal(a.Chain, b.Chain) &&
		slices.Equal(a.Ns, b.Ns) && slices.Equal(a.Extra, b.Extra)
}

// checkPatch applies one random patch to base (built from entries) and
// compares it with New of the result; it returns the result and the
// patched table, or nil when both refused it.
func checkPatch(t *testing.T, w *patchWorld, base *Table, entries []Entry) ([]Entry, *Table) {
	t.Helper()
	remove, add, result := w.patch(entries)
	want, wantErr := New(result, w.zones, w.pod)
	got, gotErr := base.Patch(remove, add)
	switch {
	case wantErr != nil && gotErr == nil:
		t.Fatalf("New refuses (%v), Patch does not\nremove %+v\nadd %+v", wantErr, remove, add)
	case wantErr == nil && gotErr != nil:
		t.Fatalf("Patch refuses (%v), New does not\nremove %+v\nadd %+v", gotErr, remove, add)
	case wantErr != nil:
		if got != nil {
			t.Fatal("Patch returned a table with its error")
		}
		return nil, nil
	}
	if g := got.Garbage(); g < 0 || g >= 1 {
		t.Errorf("Garbage = %v", g)
	}
	sameTable(t, want, got, w.r)
	if t.Failed() {
		t.Logf("zones %v\nold %+v\nremove %+v\nadd %+v", w.zones, entries, remove, add)
		t.FailNow()
	}
	return result, got
}

// TestPatchMatchesNew is the property: random tables, random patches, and
// patches of patched tables, against New.
func TestPatchMatchesNew(t *testing.T) {
	rounds := 100
	if testing.Short() {
		rounds = 25
	}
	for seed := range uint64(rounds) {
		r := rand.New(rand.NewPCG(seed, 7))
		w := newPatchWorld(r)
		entries := w.table()
		base, err := New(entries, w.zones, w.pod)
		if err != nil {
			continue // a world with a name defined twice: nothing to patch
		}
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			// Patches in a row, each of the table the last one made.
			cur, tbl := entries, base
			for range 4 {
				next, nt := checkPatch(t, w, tbl, cur)
				if nt == nil {
					// Refused: the table must be as it was.
					sameTable(t, mustNew(t, cur, w), tbl, r)
					continue
				}
				cur, tbl = next, nt
			}
			// A second patch of the first table: it no longer owns the
			// tails of the shared storage, and must not disturb the
			// tables patched from it.
			checkPatch(t, w, base, entries)
			sameTable(t, mustNew(t, entries, w), base, r)
			sameTable(t, mustNew(t, cur, w), tbl, r)
		})
	}
}

func mustNew(t *testing.T, entries []Entry, w *patchWorld) *Table {
	t.Helper()
	tbl, err := New(entries, w.zones, w.pod)
	if err != nil {
		t.Fatal(err)
	}
	return tbl
}

// TestPatchEmptyNonTerminals covers the cases by name: an empty
// non-terminal appears with a first child, goes with the last, and a
// removed name that still has children becomes one.
func TestPatchEmptyNonTerminals(t *testing.T) {
	zones := []string{"example.com"}
	parentE := Entry{Hostname: "b.example.com", IPs: addrs("10.0.0.1")}
	child := Entry{Hostname: "x.y.b.example.com", IPs: addrs("10.0.0.2")}
	t0, err := New(nil, zones, Context{})
	if err != nil {
		t.Fatal(err)
	}
	ask := func(tbl *Table, name string) int {
		r := tbl.Lookup(dns.Question{Name: name, Qtype: dns.TypeA, Qclass: dns.ClassINET})
		if r.Rcode == dns.RcodeSuccess && len(r.Answer) > 0 {
			return -1 // has records
		}
		return r.Rcode
	}
	steps := []struct {
		name           string
		remove, add    []Entry
		y, b           int // rcode of y.b.example.com and b.example.com, -1: records
		wantGarbageGt0 bool
	}{
		{name: "a child makes its ancestors empty non-terminals", add: []Entry{child}, y: dns.RcodeSuccess, b: dns.RcodeSuccess},
		{name: "an entry takes an empty non-terminal over", add: []Entry{parentE}, y: dns.RcodeSuccess, b: -1, wantGarbageGt0: true},
		{name: "a removed name with children becomes one", remove: []Entry{parentE}, y: dns.RcodeSuccess, b: dns.RcodeSuccess, wantGarbageGt0: true},
		{name: "the last child takes them with it", remove: []Entry{child}, y: dns.RcodeNameError, b: dns.RcodeNameError, wantGarbageGt0: true},
	}
	tbl := t0
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			nt, err := tbl.Patch(s.remove, s.add)
			if err != nil {
				t.Fatal(err)
			}
			if got := ask(nt, "y.b.example.com."); got != s.y {
				t.Errorf("y.b.example.com: rcode %d, want %d", got, s.y)
			}
			if got := ask(nt, "b.example.com."); got != s.b {
				t.Errorf("b.example.com: rcode %d, want %d", got, s.b)
			}
			if g := nt.Garbage(); (g > 0) != s.wantGarbageGt0 {
				t.Errorf("Garbage = %v", g)
			}
			tbl = nt
		})
	}
}

// TestPatchErrorsKeepTheTable checks that a refused patch says why and
// leaves the table serving as before.
func TestPatchErrorsKeepTheTable(t *testing.T) {
	entries, zones, pod := fixture()
	base := newFixture(t)
	tests := []struct {
		name        string
		remove, add []Entry
		want        string
	}{
		{name: "a name defined twice", add: []Entry{{Hostname: "WEB.demo.svc.cluster.local", IPs: addrs("10.0.0.1")}}, want: "already defined"},
		{name: "an endpoint name defined twice", add: []Entry{{Hostname: "my-pet.headless.default.svc.cluster.local", IPs: addrs("10.0.0.1")}}, want: "already defined"},
		{name: "a wildcard defined twice", add: []Entry{{Hostname: "*.example.com", IPs: addrs("10.0.0.1")}}, want: "already defined"},
		{name: "a bad entry", add: []Entry{{Hostname: "bad_name!.example.com"}}, want: "bad_name"},
		{name: "removing a name not there", remove: []Entry{{Hostname: "nope.example.com", IPs: addrs("10.0.0.1")}}, want: "not in the table"},
		{name: "removing with other endpoints than given", remove: []Entry{{Hostname: "headless.default.svc.cluster.local",
			Endpoints: []Endpoint{{Hostname: "other", IPs: addrs("10.3.0.100")}}}}, want: "not in the table"},
		{name: "removing a name the table defines itself", remove: []Entry{{Hostname: "dns-version.cluster.local", IPs: addrs("10.0.0.1")}}, want: "not in the table"},
		{name: "removing an empty non-terminal", remove: []Entry{{Hostname: "demo.svc.cluster.local", IPs: addrs("10.0.0.1")}}, want: "not in the table"},
		{name: "removing twice", remove: []Entry{entries[0], entries[0]}, want: "not in the table"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			nt, err := base.Patch(tc.remove, tc.add)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Patch: error %v, want one with %q", err, tc.want)
			}
			if nt != nil {
				t.Fatal("a table with the error")
			}
		})
	}
	want, err := New(entries, zones, pod)
	if err != nil {
		t.Fatal(err)
	}
	sameTable(t, want, base, rand.New(rand.NewPCG(1, 2)))
	// The table still patches after refusals.
	nt, err := base.Patch(entries[:1], nil)
	if err != nil {
		t.Fatal(err)
	}
	want, err = New(entries[1:], zones, pod)
	if err != nil {
		t.Fatal(err)
	}
	sameTable(t, want, nt, rand.New(rand.NewPCG(1, 2)))
	if _, err := (&Table{}).Patch(nil, nil); err == nil {
		t.Error("Patch of a zero Table: no error")
	}
}

// TestPatchWhileServing patches tables while others look names up in the
// tables being patched (run with -race: a patch writes nothing a reader of
// an older table reads).
func TestPatchWhileServing(t *testing.T) {
	w := newPatchWorld(rand.New(rand.NewPCG(3, 4)))
	w.zones = []string{"cluster.local", "example.com"}
	var entries []Entry
	for i := range 300 {
		entries = append(entries, Entry{Hostname: fmt.Sprintf("s%d.ns1.svc.cluster.local", i), ShortName: fmt.Sprintf("s%d", i), Namespace: "ns1",
			IPs: []netip.Addr{netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)})}})
	}
	tbl := mustNew(t, entries, w)
	var wg sync.WaitGroup
	tables := make(chan *Table, 1)
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cur := tbl
			for {
				select {
				case nt, ok := <-tables:
					if !ok {
						return
					}
					cur = nt
				default:
				}
				for i := range 50 {
					q := dns.Question{Name: fmt.Sprintf("s%d.ns1.svc.cluster.local.", i), Qtype: dns.TypeA, Qclass: dns.ClassINET}
					cur.Lookup(q)
					cur.Lookup(dns.Question{Name: "1.0.1.10.in-addr.arpa.", Qtype: dns.TypePTR, Qclass: dns.ClassINET})
				}
			}
		}()
	}
	cur := tbl
	for round := range 30 {
		i := round * 7 % len(entries)
		old := entries[i]
		e := old
		e.IPs = []netip.Addr{netip.AddrFrom4([4]byte{10, 2, byte(round), 1})}
		e.AltHosts = []string{fmt.Sprintf("alt%d.example.com", round)}
		nt, err := cur.Patch([]Entry{old}, []Entry{e})
		if err != nil {
			t.Fatal(err)
		}
		entries[i] = e
		tables <- nt
		cur = nt
	}
	close(tables)
	wg.Wait()
	sameTable(t, mustNew(t, entries, w), cur, rand.New(rand.NewPCG(5, 6)))
}

// FuzzPatch is the property of TestPatchMatchesNew for fuzzed worlds: the
// seed draws a table and a patch, and the patch also adds an entry of an
// arbitrary name (and, from 4 or 16 bytes, address), then removes it again;
// the same change applied in two stages by position ends in the same table.
// Seeds: names of the pool's kinds, a name below an existing one, a
// zone apex, a reverse name, a wildcard, bad names.
func FuzzPatch(f *testing.F) {
	for i, s := range []string{
		"s0.ns1.svc.cluster.local", "z.x.h0.example.com", "example.com", "3.0.0.10.in-addr.arpa",
		"*.z.example.com", "dns-version.cluster.local", "a..b", "*.*.x", "Q.W.Example.COM.",
	} {
		f.Add(uint64(i), s, []byte{10, 0, 0, byte(i)})
	}
	f.Fuzz(func(t *testing.T, seed uint64, name string, ip []byte) {
		w := newPatchWorld(rand.New(rand.NewPCG(seed, 11)))
		entries := w.table()
		base, err := New(entries, w.zones, w.pod)
		if err != nil {
			return
		}
		e := Entry{Hostname: name}
		if a, ok := netip.AddrFromSlice(ip); ok {
			e.IPs = []netip.Addr{a}
		}
		remove, add, result := w.patch(entries)
		add = append(add, e)
		result = append(result, e)
		want, wantErr := New(result, w.zones, w.pod)
		got, gotErr := base.Patch(remove, add)
		if (wantErr == nil) != (gotErr == nil) {
			t.Fatalf("New: %v, Patch: %v", wantErr, gotErr)
		}
		if wantErr != nil {
			sameTable(t, mustNew(t, entries, w), base, w.r)
			return
		}
		sameTable(t, want, got, w.r)
		// The same change in two stages by position (stage_test.go):
		// every stage answers as New of what it holds, the last as want.
		if staged, _ := stagedReplace(t, w, base, entries, remove, add, 2); staged != nil {
			sameTable(t, want, staged, w.r)
		}
		// And out again.
		back, err := got.Patch([]Entry{e}, nil)
		if err != nil {
			t.Fatalf("removing %q again: %v", name, err)
		}
		sameTable(t, mustNew(t, result[:len(result)-1], w), back, w.r)
	})
}

// TestPatchSameTableTwice patches one table from two goroutines at once:
// one of them appends to the shared chunks' tails, the other starts
// chunks of its own, and both answer as New does.
func TestPatchSameTableTwice(t *testing.T) {
	for seed := range uint64(10) {
		w := newPatchWorld(rand.New(rand.NewPCG(seed, 21)))
		entries := w.table()
		base, err := New(entries, w.zones, w.pod)
		if err != nil {
			continue
		}
		type job struct {
			remove, add, result []Entry
			got                 *Table
			err                 error
		}
		jobs := make([]job, 2)
		for i := range jobs {
			jobs[i].remove, jobs[i].add, jobs[i].result = w.patch(entries)
		}
		var wg sync.WaitGroup
		for i := range jobs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				jobs[i].got, jobs[i].err = base.Patch(jobs[i].remove, jobs[i].add)
			}()
		}
		wg.Wait()
		for _, j := range jobs {
			want, err := New(j.result, w.zones, w.pod)
			if (err == nil) != (j.err == nil) {
				t.Fatalf("seed %d: New: %v, Patch: %v", seed, err, j.err)
			}
			if err == nil {
				sameTable(t, want, j.got, w.r)
			}
		}
		sameTable(t, mustNew(t, entries, w), base, w.r)
	}
}
