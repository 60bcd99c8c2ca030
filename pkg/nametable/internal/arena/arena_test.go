package arena

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"unsafe"
)

// tnode is a node as a table declares one: Head first, then its own data.
type tnode struct {
	Head
	v uint32
}

type tstore = Store[tnode, int]

// add stores name with a node and n records, and indexes it.
func add(tb testing.TB, s *tstore, name string, n int) ID {
	tb.Helper()
	id, nd, err := s.NewNode()
	if err != nil {
		tb.Fatal(err)
	}
	nd.Name, _ = s.PutText("", name)
	recs, ref := s.PutRecords(n)
	for i := range recs {
		recs[i] = int(id)*100 + i
	}
	nd.RR, nd.v = ref, id
	s.Insert(id)
	return id
}

func TestNewWantsHeadFirst(t *testing.T) {
	type bad struct {
		v uint32
		Head
	}
	defer func() {
		if recover() == nil {
			t.Error("New accepted a node type whose first field is not Head")
		}
	}()
	New[bad, int](0)
}

// TestWrittenOnceNeverMoved checks invariant 1: names, records and nodes
// keep their place and their bytes while the store grows past many
// chunks.
func TestWrittenOnceNeverMoved(t *testing.T) {
	s := New[tnode, int](0)
	const n = 20000
	fqdns := make([]string, n)
	runs := make([][]int, n)
	nodes := make([]*tnode, n)
	for i := range n {
		id, nd, err := s.NewNode()
		if err != nil {
			t.Fatal(err)
		}
		if id != ID(i) {
			t.Fatalf("node %d got ID %d", i, id)
		}
		nd.Name, fqdns[i] = s.PutText("p.", fmt.Sprintf("name-%d.example", i))
		runs[i], nd.RR = s.PutRecords(1 + i%7)
		for j := range runs[i] {
			runs[i][j] = i
		}
		nodes[i] = nd
	}
	nc, rc, tc := s.Chunks()
	if nc < 10 || rc < 10 || tc < 5 {
		t.Fatalf("only %d node, %d record, %d text chunks: the test must cross chunks", nc, rc, tc)
	}
	for i := range n {
		want := fmt.Sprintf("p.name-%d.example", i)
		if fqdns[i] != want+"." || s.Key(nodes[i].Name) != want || s.FQDN(nodes[i].Name) != want+"." {
			t.Fatalf("name %d: %q, key %q, want %q", i, fqdns[i], s.Key(nodes[i].Name), want)
		}
		if s.Node(ID(i)) != nodes[i] {
			t.Fatalf("node %d moved", i)
		}
		got := s.Records(nodes[i].RR, uint32(len(runs[i])))
		if unsafe.SliceData(got) != unsafe.SliceData(runs[i]) || cap(got) != len(runs[i]) {
			t.Fatalf("records of %d moved or are not capacity-limited", i)
		}
		for _, v := range got {
			if v != i {
				t.Fatalf("records of %d overwritten: %v", i, got)
			}
		}
	}
}

// TestIndexMatchesMap checks invariant 4 against a map under random
// inserts, replacements, deletions and growth.
func TestIndexMatchesMap(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	s := New[tnode, int](0)
	want := map[string]ID{}
	for step := range 60000 {
		name := fmt.Sprintf("n%d", r.IntN(5000))
		switch op := r.IntN(10); {
		case op < 5: // insert or replace
			want[name] = add(t, &s, name, 1)
		case op < 8: // delete
			i, ok := s.Find(name)
			if _, in := want[name]; ok != in {
				t.Fatalf("step %d: Find(%s) = %v, map has %v", step, name, ok, in)
			}
			if ok {
				s.Delete(i)
				delete(want, name)
			}
		default: // lookup
			n := s.Lookup([]byte(name))
			id, in := want[name]
			if (n != nil) != in || (in && n.v != id) {
				t.Fatalf("step %d: Lookup(%s) = %+v, want %d (%v)", step, name, n, id, in)
			}
		}
		if s.Len() != len(want) {
			t.Fatalf("step %d: Len %d, map %d", step, s.Len(), len(want))
		}
		if s.Len()*4 > len(s.slots)*3 {
			t.Fatalf("step %d: load %d/%d over 3/4", step, s.Len(), len(s.slots))
		}
	}
	s.Compact()
	seen := 0
	s.Each(func(key string, n *tnode) {
		if want[key] != n.v {
			t.Errorf("Each: %s -> %d, want %d", key, n.v, want[key])
		}
		seen++
	})
	if seen != len(want) {
		t.Errorf("Each saw %d names, want %d", seen, len(want))
	}
	for name, id := range want {
		i, ok := s.Find(name)
		if !ok || s.At(i) != id {
			t.Fatalf("after Compact: %s not at %d", name, id)
		}
	}
}

// TestForkTails checks invariant 2: a fork of the tip appends to the
// shared tails, any other fork starts chunks of its own, and neither
// writes a byte the original reads.
func TestForkTails(t *testing.T) {
	s := New[tnode, int](0)
	for i := range 10 {
		add(t, &s, fmt.Sprintf("a%d", i), 1)
	}
	s.Start()
	if !s.Claim() || s.Claim() {
		t.Fatal("Claim: the tip must be taken once")
	}
	s.Release(&s)
	_, rc, tc := s.Chunks()
	tail := len(s.text[tc-1])

	f := s.Fork(false, 1, nil)
	add(t, &f, "b", 1)
	if _, frc, ftc := f.Chunks(); frc != rc+1 || ftc != tc+1 {
		t.Errorf("a fork off the tip appended to the shared chunks (%d/%d record, %d/%d text chunks)", frc, rc, ftc, tc)
	}
	if !s.Claim() {
		t.Fatal("the tip was lost")
	}
	g := s.Fork(true, 1, nil)
	s.Release(&g)
	add(t, &g, "c", 1)
	if _, grc, gtc := g.Chunks(); grc != rc || gtc != tc {
		t.Errorf("the tip's fork started chunks (%d/%d record, %d/%d text chunks)", grc, rc, gtc, tc)
	}
	if len(s.text[tc-1]) != tail || s.Lookup([]byte("b")) != nil || s.Lookup([]byte("c")) != nil {
		t.Error("a fork changed what the original holds")
	}
	if g.Lookup([]byte("c")) == nil || g.Lookup([]byte("a3")) == nil || f.Lookup([]byte("b")) == nil {
		t.Error("a fork lost a name")
	}
}

// TestReclaim checks invariant 5: once every name in the first chunks is
// deleted from a fork, Reclaim drops those chunks, keeps the last of each
// kind and every chunk a live name uses, and the names left resolve.
func TestReclaim(t *testing.T) {
	s := New[tnode, int](0)
	const n = 5000
	for i := range n {
		add(t, &s, fmt.Sprintf("name-%d", i), 2)
	}
	s.Start()
	nc, rc, tc := s.Chunks()
	f := s.Fork(false, 0, nil)
	for i := range n / 2 {
		j, ok := f.Find(fmt.Sprintf("name-%d", i))
		if !ok {
			t.Fatalf("name-%d missing", i)
		}
		f.Delete(j)
	}
	f.Reclaim()
	hn, hr, ht := f.Held(nc, rc, tc)
	if hn >= nc || hr >= rc || ht >= tc {
		t.Errorf("held %d/%d node, %d/%d record, %d/%d text chunks: nothing dropped", hn, nc, hr, rc, ht, tc)
	}
	if f.nodes[nc-1] == nil || f.recs[rc-1] == nil || f.text[tc-1] == nil {
		t.Error("the last chunk of a kind was dropped")
	}
	for i := n / 2; i < n; i++ {
		nd := f.Lookup([]byte(fmt.Sprintf("name-%d", i)))
		if nd == nil || f.Records(nd.RR, 2)[1] != int(nd.v)*100+1 {
			t.Fatalf("name-%d lost after Reclaim", i)
		}
	}
	if got, want := f.HeldNodes(), int(f.Next())-(nc-hn)*nodeChunk; got != want {
		t.Errorf("HeldNodes %d, want %d", got, want)
	}
	if s.Lookup([]byte("name-0")) == nil {
		t.Error("Reclaim of a fork dropped a chunk of the original")
	}
}

// TestRefCountsOthers checks that nodes outside the index (Ref, and the
// others of a first Fork) keep their chunks.
func TestRefCountsOthers(t *testing.T) {
	s := New[tnode, int](0)
	id, nd, _ := s.NewNode()
	nd.Name, _ = s.PutText("", "*.wild")
	_, nd.RR = s.PutRecords(1)
	for i := range 3000 {
		add(t, &s, fmt.Sprintf("name-%d", i), 1)
	}
	s.Start()
	f := s.Fork(false, 0, []*tnode{nd})
	if got, ok := f.IDOf(nd); !ok || got != id {
		t.Fatalf("IDOf = %d, %v; want %d", got, ok, id)
	}
	for i := range 3000 {
		j, _ := f.Find(fmt.Sprintf("name-%d", i))
		f.Delete(j)
	}
	f.Reclaim()
	if f.nodes[0] == nil || f.text[0] == nil || f.recs[0] == nil {
		t.Fatal("a chunk the wildcard uses was dropped")
	}
	f.Ref(id, -1)
	f.Reclaim()
	if f.nodes[0] != nil {
		t.Error("the first node chunk was kept after its last reference went")
	}
}

// TestSpotPut checks that a name looked up with SpotOf and stored with Put
// is found like one stored with Insert, replacing the node there before,
// across the growth Reserve makes, and that Each visits every stored name
// once.
func TestSpotPut(t *testing.T) {
	s := New[tnode, int](0)
	const n = 3000
	ids := make(map[string]ID)
	for i := range n {
		name := fmt.Sprintf("n%d.example", i%(n/2)) // each name twice
		s.Reserve(1, 0)
		sp, old := s.SpotOf(name)
		if prev, ok := ids[name]; (old != nil) != ok || ok && old.v != prev {
			t.Fatalf("SpotOf(%q) found %v, want the node of ID %d (stored: %v)", name, old, prev, ok)
		}
		id, nd, err := s.NewNode()
		if err != nil {
			t.Fatal(err)
		}
		nd.Name, _ = s.PutText("", name)
		nd.v = id
		s.Put(sp, id)
		ids[name] = id
	}
	if s.Len() != len(ids) {
		t.Fatalf("Len = %d, want %d", s.Len(), len(ids))
	}
	for name, id := range ids {
		if nd := s.Lookup([]byte(name)); nd == nil || nd.v != id {
			t.Fatalf("Lookup(%q) = %v, want the node of ID %d", name, nd, id)
		}
	}
	seen := make(map[string]bool)
	s.Each(func(key string, nd *tnode) {
		if seen[key] || ids[key] != nd.v {
			t.Fatalf("Each gave %q (node %d) twice or not its stored node (%d)", key, nd.v, ids[key])
		}
		seen[key] = true
	})
	if len(seen) != len(ids) {
		t.Fatalf("Each visited %d names, want %d", len(seen), len(ids))
	}
}

// TestReserveExpect checks how far the index grows when it must: to hold
// the names expected at a load of 3/4, by a quarter at least and at most
// doubling; doubling when nothing is expected.
func TestReserveExpect(t *testing.T) {
	for _, c := range []struct {
		expect, want int
	}{
		{expect: 0, want: 2000},
		{expect: 1100, want: 1100*4/3 + 1},
		{expect: 760, want: 1250},    // a quarter at least
		{expect: 100000, want: 2000}, // doubling at most
	} {
		s := New[tnode, int](0)
		s.Grow(1000)
		for i := range 750 {
			add(t, &s, fmt.Sprintf("n%d", i), 1)
		}
		if len(s.slots) != 1000 {
			t.Fatalf("the index grew to %d slots before it was full", len(s.slots))
		}
		s.Reserve(1, c.expect)
		if len(s.slots) != c.want {
			t.Errorf("Reserve(1, %d): %d slots, want %d", c.expect, len(s.slots), c.want)
		}
		for i := range 750 {
			if s.Lookup([]byte(fmt.Sprintf("n%d", i))) == nil {
				t.Fatalf("n%d lost growing to %d slots", i, len(s.slots))
			}
		}
	}
}

// TestGrowFor checks that GrowFor sizes the index for the names given at
// a load of 3/4, never shrinks it, and keeps every name.
func TestGrowFor(t *testing.T) {
	s := New[tnode, int](100)
	for i := range 100 {
		add(t, &s, fmt.Sprintf("n%d", i), 1)
	}
	s.GrowFor(3000)
	if len(s.slots) != 3000*4/3+1 {
		t.Errorf("GrowFor(3000): %d slots, want %d", len(s.slots), 3000*4/3+1)
	}
	s.GrowFor(10)
	if len(s.slots) != 3000*4/3+1 {
		t.Errorf("GrowFor(10) changed the index to %d slots", len(s.slots))
	}
	for i := range 100 {
		if s.Lookup([]byte(fmt.Sprintf("n%d", i))) == nil {
			t.Fatalf("n%d lost", i)
		}
	}
}
