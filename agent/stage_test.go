package agent

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/miekg/dns"

	meshmetrics "github.com/meshdns/meshdns/internal/metrics"
	"github.com/meshdns/meshdns/pkg/nametable"
)

// stageWorld is a table of n names (name i: svc-i.example.org, address
// 10.0.x.y) and the tables agent serves it through, for the staged
// replacement alone; the real file and stream paths are in
// TestStagedFileReplacement and TestStagedStreamReplacement.
type stageWorld struct {
	ts        *tables
	published []*nametable.Table
	// versions is the version served when each table was published.
	versions []string
}

func stageName(i int) string { return fmt.Sprintf("svc-%d.example.org", i) }

func stageAddr(i, gen int) string { return fmt.Sprintf("10.%d.%d.%d", gen, byte(i>>8), byte(i)) }

// contents is a content per name, as a walk yields it: the address.
type contents map[string]string

func (c contents) walk(each func(host string, raw []byte) error) error {
	hosts := make([]string, 0, len(c))
	for h := range c {
		hosts = append(hosts, h)
	}
	slices.Sort(hosts)
	for _, h := range hosts {
		if err := each(h, []byte(c[h])); err != nil {
			return err
		}
	}
	return nil
}

func convertAddr(host string, raw []byte) (nametable.Entry, error) {
	a, err := netip.ParseAddr(string(raw))
	if err != nil {
		return nametable.Entry{}, err
	}
	return nametable.Entry{Hostname: host, IPs: []netip.Addr{a}}, nil
}

func newStageWorld(t *testing.T, n int) *stageWorld {
	t.Helper()
	m, err := newMetrics(meshmetrics.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	w := &stageWorld{}
	w.ts = &tables{pod: nametable.Context{}, m: m, now: time.Now, publish: func(tb *nametable.Table) {
		w.published = append(w.published, tb)
		w.versions = append(w.versions, w.ts.current().Version)
	}}
	b, err := nametable.NewBuilder([]string{"example.org"}, nametable.Context{}, n)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		e, _ := convertAddr(stageName(i), []byte(stageAddr(i, 0)))
		if err := b.Add(&e); err != nil {
			t.Fatal(err)
		}
	}
	w.ts.cur.Store(&served{Version: "v1", Source: sourceControlPlane, Names: n, Table: b.Table()})
	return w
}

// apply applies the change from old to next (the changed names only) as
// version v2, staged.
func (w *stageWorld) apply(old, next contents, names int) error {
	c := &stagedChange{old: old.walk, next: next.walk, convertOld: convertAddr, convertNext: convertAddr, names: names}
	_, err := w.ts.buildFrom(sourceControlPlane, "v2", func(prev *served) (*nametable.Table, int, error) {
		return w.ts.applyStaged(prev, c)
	}, nil)
	return err
}

// answer is the address tb answers for name, "" for none.
func answer(tb *nametable.Table, name string) string {
	r := tb.Lookup(dns.Question{Name: name + ".", Qtype: dns.TypeA, Qclass: dns.ClassINET})
	if len(r.Answer) != 1 {
		return ""
	}
	return r.Answer[0].(*dns.A).A.String()
}

// Every name changes (a new address), a few go and a few come: each stage
// is served as the old version, the last as the new one, which answers
// every name right.
func TestApplyStagedReplacesEveryName(t *testing.T) {
	const n = 20000
	w := newStageWorld(t, n)
	old, next := contents{}, contents{}
	for i := range n {
		old[stageName(i)] = stageAddr(i, 0)
		if i%100 != 7 { // 50 names go
			next[stageName(i)] = stageAddr(i, 1)
		}
	}
	for i := n; i < n+30; i++ { // 30 come
		next[stageName(i)] = stageAddr(i, 1)
	}
	if err := w.apply(old, next, len(next)); err != nil {
		t.Fatal(err)
	}
	// The old table again (its answer cache dropped), the stages before
	// the last as v1, the last as v2.
	wantVersions := []string{"v1"}
	for range stageCount - 1 {
		wantVersions = append(wantVersions, "v1")
	}
	wantVersions = append(wantVersions, "v2")
	if !slices.Equal(w.versions, wantVersions) {
		t.Errorf("versions served at each publish %v, want %v", w.versions, wantVersions)
	}
	cur := w.ts.current()
	if cur.Version != "v2" || cur.Names != len(next) || cur.Partial {
		t.Errorf("served %s with %d names (partial %v), want v2 with %d", cur.Version, cur.Names, cur.Partial, len(next))
	}
	for i := range n + 30 {
		want := stageAddr(i, 1)
		if i%100 == 7 && i < n {
			want = ""
		}
		if got := answer(cur.Table, stageName(i)); got != want {
			t.Fatalf("%s answers %q, want %q", stageName(i), got, want)
		}
	}
	// A middle stage held some names at each version.
	mid := w.published[stageCount/2]
	if answer(mid, stageName(0)) != stageAddr(0, 1) || answer(mid, stageName(n-1)) != stageAddr(n-1, 0) {
		t.Errorf("a middle stage answers %s %s, want the first name new and the last old",
			answer(mid, stageName(0)), answer(mid, stageName(n-1)))
	}
	if g := cur.Table.Garbage(); g > maxGarbage {
		t.Errorf("Garbage %.2f after the replacement: the next delta would build whole", g)
	}
}

// A stage that fails (a bad address among the names of a middle stage)
// undoes the stages before it: the old version serves again, every name
// at its old address, and the error says which stage failed.
func TestApplyStagedFailureRestoresTheOldTable(t *testing.T) {
	const n = 3000
	w := newStageWorld(t, n)
	old, next := contents{}, contents{}
	for i := range n {
		old[stageName(i)] = stageAddr(i, 0)
		next[stageName(i)] = stageAddr(i, 1)
	}
	next[stageName(n*6/10)] = "not-an-address"
	err := w.apply(old, next, len(next))
	if err == nil {
		t.Fatal("a bad address was applied")
	}
	t.Log(err)
	cur := w.ts.current()
	if cur.Version != "v1" || cur.Names != n || cur.Partial {
		t.Errorf("served %s with %d names (partial %v), want v1 with %d", cur.Version, cur.Names, cur.Partial, n)
	}
	if w.published[len(w.published)-1] != cur.Table {
		t.Error("the table served is not the one the DNS server has")
	}
	for i := range n {
		if got, want := answer(cur.Table, stageName(i)), stageAddr(i, 0); got != want {
			t.Fatalf("%s answers %q, want %q", stageName(i), got, want)
		}
	}
	for _, v := range w.versions {
		if v != "v1" {
			t.Errorf("version %s served during a failed replacement", v)
		}
	}
	// A change that comes to another number of names than the new
	// table has (a hash collision in a diff) fails at the last stage.
	next[stageName(n*6/10)] = stageAddr(n*6/10, 1)
	err = w.apply(old, next, n+1)
	if !errors.Is(err, errStagedCount) {
		t.Fatalf("a staged change to the wrong number of names: %v", err)
	}
	if got, want := answer(w.ts.current().Table, stageName(0)), stageAddr(0, 0); got != want {
		t.Errorf("%s answers %q after the failed last stage, want %q", stageName(0), got, want)
	}
}

// A stage that fails and whose undoing fails too (the old content cannot
// be read again: a file changed meanwhile) leaves the partly new table
// serving, marked Partial so that the next change is built whole, and
// still as the old version.
func TestApplyStagedUndoFailureIsPartial(t *testing.T) {
	const n = 3000
	w := newStageWorld(t, n)
	old, next := contents{}, contents{}
	for i := range n {
		old[stageName(i)] = stageAddr(i, 0)
		next[stageName(i)] = stageAddr(i, 1)
	}
	next[stageName(n*6/10)] = "not-an-address"
	// The old content reads once for the plan and once per stage done;
	// the undo's reads fail.
	reads, failFrom := 0, 0
	oldWalk := func(each func(host string, raw []byte) error) error {
		if reads++; failFrom > 0 && reads >= failFrom {
			return errors.New("the old content is gone")
		}
		return old.walk(each)
	}
	c := &stagedChange{old: oldWalk, next: next.walk, convertOld: convertAddr, convertNext: convertAddr, names: n}
	// plan (1) + one per stage up to the failing one, whose remove walk
	// runs before its add walk fails.
	pos, ok := w.ts.current().Table.Position(stageName(n * 6 / 10))
	if !ok {
		t.Fatal("no position")
	}
	failStage := int(pos * stageCount)
	failFrom = 1 + failStage + 2
	_, err := w.ts.buildFrom(sourceControlPlane, "v2", func(prev *served) (*nametable.Table, int, error) {
		return w.ts.applyStaged(prev, c)
	}, nil)
	if err == nil {
		t.Fatal("a bad address was applied")
	}
	cur := w.ts.current()
	if !cur.Partial || cur.Version != "v1" {
		t.Fatalf("served %s, partial %v; want v1, partial", cur.Version, cur.Partial)
	}
	if w.published[len(w.published)-1] != cur.Table {
		t.Error("the table served is not the one the DNS server has")
	}
	if answer(cur.Table, stageName(0)) != stageAddr(0, 1) || answer(cur.Table, stageName(n-1)) != stageAddr(n-1, 0) {
		t.Errorf("the partial table answers %s %s, want the first name new and the last old",
			answer(cur.Table, stageName(0)), answer(cur.Table, stageName(n-1)))
	}
}
