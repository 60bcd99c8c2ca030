package nametable

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"testing"

	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/pkg/nametable/internal/arena"
)

func qA(name string) dns.Question {
	return dns.Question{Name: name + ".", Qtype: dns.TypeA, Qclass: dns.ClassINET}
}

// A staged replacement, as the agent applies a change too large for one
// patch: the change is cut into k patches by the Position of the old
// entries (an update goes with its old entry, a new name with the last
// patch), each applied to the table the last one made.

// stageOf is the stage of the entry named host: by its position in base,
// the last stage for a name base does not place.
func stageOf(base *Table, host string, k int) int {
	pos, ok := base.Position(host)
	if !ok {
		return k - 1
	}
	return int(pos * float64(k))
}

// stages cuts remove and add into k patches by position in base.
func stages(base *Table, remove, add []Entry, k int) (removes, adds [][]Entry) {
	removes, adds = make([][]Entry, k), make([][]Entry, k)
	for _, e := range remove {
		s := stageOf(base, e.Hostname, k)
		removes[s] = append(removes[s], e)
	}
	for _, e := range add {
		s := stageOf(base, e.Hostname, k)
		adds[s] = append(adds[s], e)
	}
	return removes, adds
}

// reused hands s over through one Entry variable, overwritten for each,
// as a caller converting entries as it reads them does.
func reused(s []Entry) Entries {
	return func(each func(*Entry) error) error {
		var e Entry
		for i := range s {
			e = s[i]
			if err := each(&e); err != nil {
				return err
			}
		}
		return nil
	}
}

// stagedReplace applies remove and add to base (built from entries) in k
// patches and checks every table on the way against New of the entries it
// holds then: the old entries not yet removed, in their order, then the
// added ones in the order they came. It returns the last table and its
// entries, or nil once a stage is refused (New refusing it too).
func stagedReplace(t *testing.T, w *patchWorld, base *Table, entries, remove, add []Entry, k int) (*Table, []Entry) {
	t.Helper()
	removes, adds := stages(base, remove, add, k)
	gone := make(map[string]bool)
	var added []Entry
	cur := base
	for s := range k {
		for _, e := range removes[s] {
			gone[e.Hostname] = true
		}
		added = append(added, adds[s]...)
		var result []Entry
		for _, e := range entries {
			if !gone[e.Hostname] {
				result = append(result, e)
			}
		}
		result = append(result, added...)
		want, wantErr := New(result, w.zones, w.pod)
		got, gotErr := cur.PatchFrom(reused(removes[s]), reused(adds[s]), len(adds[s]))
		switch {
		case (wantErr == nil) != (gotErr == nil):
			t.Fatalf("stage %d of %d: New: %v, Patch: %v", s, k, wantErr, gotErr)
		case wantErr != nil:
			return nil, nil
		}
		sameTable(t, want, got, w.r)
		if t.Failed() {
			t.Logf("stage %d of %d\nzones %v\nold %+v\nremove %+v\nadd %+v", s, k, w.zones, entries, removes[s], adds[s])
			t.FailNow()
		}
		cur = got
	}
	return cur, nil
}

// TestStagedReplaceMatchesNew: random tables replaced in 2 to 4 stages,
// every stage against New, also of tables patched before (whose storage
// has chunks of their own) and when most entries change.
func TestStagedReplaceMatchesNew(t *testing.T) {
	rounds := 60
	if testing.Short() {
		rounds = 15
	}
	for seed := range uint64(rounds) {
		r := rand.New(rand.NewPCG(seed, 31))
		w := newPatchWorld(r)
		entries := w.table()
		base, err := New(entries, w.zones, w.pod)
		if err != nil {
			continue
		}
		// Half the time the base is a patched table that does not own
		// the tails of its storage: a second patch of the table New
		// made starts chunks of its own.
		if r.IntN(2) == 0 {
			if _, err := base.Patch(nil, nil); err != nil {
				t.Fatal(err)
			}
			next, nt := checkPatch(t, w, base, entries)
			if nt == nil {
				continue
			}
			entries, base = next, nt
		}
		var remove, add []Entry
		if r.IntN(2) == 0 {
			remove, add, _ = w.patch(entries)
		} else {
			// Every entry replaced (same names, new content) and a few added.
			for _, e := range entries {
				remove = append(remove, e)
				add = append(add, w.entry(e.Hostname))
			}
			have := make(map[string]bool)
			for _, e := range entries {
				have[e.Hostname] = true
			}
			for _, name := range patchPool {
				if !have[name] && r.IntN(5) == 0 {
					add = append(add, w.entry(name))
				}
			}
		}
		stagedReplace(t, w, base, entries, remove, add, 2+r.IntN(3))
	}
}

// TestPatchDropsEmptiedChunks replaces every name of a table of simple
// names in five stages by position and checks that the stages drop the
// chunks of the old table they empty, so that at the end the new table
// holds of the old one's storage only the chunks of the names New made
// itself (the zone apex first, the empty non-terminals and dns-version
// last) and the last chunk of each kind (which a next patch appends to).
func TestPatchDropsEmptiedChunks(t *testing.T) {
	const n, k = 5000, 5
	base := buildSimple(t, n)
	oldNodes, oldRRs, oldText := base.st.Chunks()
	if oldNodes < k || oldRRs < 3 || oldText < 3 {
		t.Fatalf("a table of %d chunks of nodes, %d of records and %d of names: too few to test", oldNodes, oldRRs, oldText)
	}
	// The chunks the table's own names keep.
	keep := [3]map[uint32]bool{{uint32(oldNodes - 1): true}, {uint32(oldRRs - 1): true}, {uint32(oldText - 1): true}}
	base.st.EachSlot(func(_ int, id arena.ID, nd *node) {
		if nd.is(flagNoCanon) || nd.isVersion() {
			keep[0][id>>arena.NodeChunkBits], keep[1][nd.RR>>16], keep[2][nd.Name>>16] = true, true, true
		}
	})
	old := make([]Entry, n)
	for i := range old {
		simpleEntry(&old[i], i)
	}
	renumbered := func(e Entry) Entry {
		a := e.IPs[0].As4()
		e.IPs = []netip.Addr{netip.AddrFrom4([4]byte{11, a[1], a[2], a[3]})}
		return e
	}
	held := func(tbl *Table) (nodes, rrs, text int) { return tbl.st.Held(oldNodes, oldRRs, oldText) }
	cur := base
	prevNodes := oldNodes
	var result []Entry
	for s := range k {
		var remove, add []Entry
		for _, e := range old {
			if stageOf(base, e.Hostname, k) == s {
				remove = append(remove, e)
				add = append(add, renumbered(e))
			}
		}
		if len(remove) == 0 {
			t.Fatalf("stage %d: no entry placed there", s)
		}
		nt, err := cur.Patch(remove, add)
		if err != nil {
			t.Fatal(err)
		}
		result = append(result, add...)
		nodes, rrs, text := held(nt)
		t.Logf("stage %d: %d entries; held of the old storage: %d/%d node chunks, %d/%d record chunks, %d/%d name chunks; garbage %.3f",
			s, len(remove), nodes, oldNodes, rrs, oldRRs, text, oldText, nt.Garbage())
		if nodes > prevNodes {
			t.Errorf("stage %d held %d of the old node chunks, the stage before %d", s, nodes, prevNodes)
		}
		if g := nt.Garbage(); g > 0.35 {
			t.Errorf("stage %d: Garbage %.3f, want at most a stage's share of the table", s, g)
		}
		prevNodes = nodes
		cur = nt
	}
	nodes, rrs, text := held(cur)
	if nodes != len(keep[0]) || rrs != len(keep[1]) || text != len(keep[2]) {
		t.Errorf("after every name was replaced the table holds %d node, %d record and %d name chunks of the old storage, want %d, %d and %d (those of the names New made itself, and the last)",
			nodes, rrs, text, len(keep[0]), len(keep[1]), len(keep[2]))
	}
	if nodes >= oldNodes-2 {
		t.Errorf("of %d node chunks, %d are still held", oldNodes, nodes)
	}
	// And the result answers as New of the new entries does.
	var want *Table
	{
		b, err := NewBuilder(bigZones, bigPod, 0)
		if err != nil {
			t.Fatal(err)
		}
		for i := range result {
			if err := b.Add(&result[i]); err != nil {
				t.Fatal(err)
			}
		}
		want = b.Table()
	}
	if cur.Len() != want.Len() {
		t.Fatalf("Len %d, New %d", cur.Len(), want.Len())
	}
	for _, i := range []int{0, 1, n / 2, n - 1} {
		w := want.Lookup(qA(old[i].Hostname))
		g := cur.Lookup(qA(old[i].Hostname))
		if len(g.Answer) != 1 || g.Answer[0].String() != w.Answer[0].String() {
			t.Errorf("%s: %v, New %v", old[i].Hostname, g.Answer, w.Answer)
		}
	}
	// The table it came from is untouched.
	if got := base.Lookup(qA(old[0].Hostname)); len(got.Answer) != 1 || got.Answer[0].String() == cur.Lookup(qA(old[0].Hostname)).Answer[0].String() {
		t.Errorf("the base table answers %v after the stages", got.Answer)
	}
}

// TestStagedReplaceMemory replaces every name of a table of 100,000 simple
// names (a new address each) in 8 stages by position, the entries of each
// stage converted as the patch reads them, and checks the heap after a
// collection at each stage: with the stage before still referenced (a
// reader finishing with it: the peak of the stage), at most the table plus
// what the stage adds (an eighth of the table) and the copies of the
// indexes; once it is dropped, at most the table plus a stage's share.
// Built whole, the new table would cost a second table beside the first.
func TestStagedReplaceMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a table of 100,000 names")
	}
	const n, k = 100_000, 8
	heap := func() float64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return float64(m.HeapAlloc)
	}
	stage := make([]uint8, n)
	before := heap()
	cur := buildSimple(t, n)
	table := heap() - before
	var e Entry
	for i := range n {
		simpleEntry(&e, i)
		stage[i] = uint8(stageOf(cur, e.Hostname, k))
	}
	entries := func(s int, renumber bool) Entries {
		return func(each func(*Entry) error) error {
			var e Entry
			for i := range n {
				if int(stage[i]) != s {
					continue
				}
				simpleEntry(&e, i)
				if renumber {
					a := e.IPs[0].As4()
					e.IPs[0] = netip.AddrFrom4([4]byte{11, a[1], a[2], a[3]})
				}
				if err := each(&e); err != nil {
					return err
				}
			}
			return nil
		}
	}
	for s := range k {
		nt, err := cur.PatchFrom(entries(s, false), entries(s, true), n/k)
		if err != nil {
			t.Fatal(err)
		}
		both := (heap() - before) / table
		runtime.KeepAlive(cur)
		cur = nt
		after := (heap() - before) / table
		t.Logf("stage %d: heap / table: %.3f with the stage before, %.3f without", s, both, after)
		if both > 1+2.0/k+0.1 {
			t.Errorf("stage %d: %.3f tables live with the stage before, want at most 1 + 2/%d + the index copies", s, both, k)
		}
		if after > 1+1.0/k {
			t.Errorf("stage %d: %.3f tables live, want at most 1 + 1/%d", s, after, k)
		}
	}
	if got := cur.Lookup(qA("svc-0.ns-0.svc.cluster.local")); len(got.Answer) != 1 || got.Answer[0].(*dns.A).A[0] != 11 {
		t.Errorf("svc-0 answers %v, want its new address", got.Answer)
	}
	if g := cur.Garbage(); g > 0.05 {
		t.Errorf("Garbage %.3f after every name was replaced", g)
	}
}

// A headless service's shape (its SRV targets and their records) is its
// own: a patch that removes the service drops the shape, and the next
// added takes its place. Kept instead, each replaced service's shape held
// its endpoint records, and with them the chunks of every table it
// replaced: a change of every name in stages freed nothing of the old
// table's headless services.
func TestPatchDropsHeadlessShapes(t *testing.T) {
	const n = 50
	headless := func(i, gen int) Entry {
		return Entry{
			Hostname: fmt.Sprintf("db-%d.ns.svc.cluster.local", i), Registry: "Kubernetes", ShortName: fmt.Sprintf("db-%d", i), Namespace: "ns",
			Ports: []Port{{Name: "pg", Port: 5432, Protocol: "TCP"}},
			Endpoints: []Endpoint{
				{Hostname: "a", IPs: []netip.Addr{netip.AddrFrom4([4]byte{10, byte(gen), byte(i), 1})}},
				{Hostname: "b", IPs: []netip.Addr{netip.AddrFrom4([4]byte{10, byte(gen), byte(i), 2})}},
			},
		}
	}
	entries := func(gen int) []Entry {
		var es []Entry
		for i := range n {
			es = append(es, headless(i, gen))
		}
		return es
	}
	cur, err := New(entries(0), []string{"cluster.local"}, Context{Namespace: "ns"})
	if err != nil {
		t.Fatal(err)
	}
	shapes := len(cur.shapes)
	for gen := 1; gen <= 4; gen++ {
		nt, err := cur.Patch(entries(gen-1), entries(gen))
		if err != nil {
			t.Fatal(err)
		}
		cur = nt
		own := 0
		for _, sh := range cur.shapes {
			if sh != nil && sh.targets != nil {
				own++
				if got := sh.extra[0].(*dns.A).A[1]; got != byte(gen) {
					t.Errorf("patch %d: a shape holds the records of generation %d", gen, got)
				}
			}
		}
		if own != n || len(cur.shapes) != shapes {
			t.Errorf("patch %d: %d shapes of headless services in %d, want %d in %d", gen, own, len(cur.shapes), n, shapes)
		}
	}
	r := cur.Lookup(dns.Question{Name: "_pg._tcp.db-7.ns.svc.cluster.local.", Qtype: dns.TypeSRV, Qclass: dns.ClassINET})
	if len(r.Answer) != 2 || len(r.Extra) != 2 || r.Extra[0].(*dns.A).A[1] != 4 {
		t.Errorf("SRV of db-7 after the patches: %v, extra %v; want 2 targets of generation 4", r.Answer, r.Extra)
	}
}
