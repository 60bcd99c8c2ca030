package registry

import (
	"context"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/meshdns/meshdns/pkg/nametable"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func ent(host, ip string, ns ...string) Entry {
	return Entry{Entry: nametable.Entry{Hostname: host, IPs: []netip.Addr{netip.MustParseAddr(ip)}, Registry: "File"}, Namespaces: ns}
}

func run(t *testing.T, cfg Config) *Registry {
	t.Helper()
	if cfg.Debounce == 0 {
		cfg.Debounce = 5 * time.Millisecond
	}
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = r.Run(ctx) }()
	t.Cleanup(func() { cancel(); wg.Wait() })
	return r
}

// await waits for a model newer than after.
func await(t *testing.T, r *Registry, ch <-chan struct{}, after uint64) *Model {
	t.Helper()
	for {
		select {
		case <-ch:
			if m := r.Latest(); m != nil && m.Version > after {
				return m
			}
		case <-time.After(5 * time.Second):
			t.Fatal("no new model")
		}
	}
}

func ips(m *Model) map[string][]string {
	out := map[string][]string{}
	for h, cs := range m.Names {
		for _, c := range cs {
			out[h] = append(out[h], c.Source+":"+c.Info.GetIps()[0])
		}
	}
	return out
}

func TestMerge(t *testing.T) {
	r := run(t, Config{})
	ch := r.Subscribe()
	r.Update("kubernetes", Snapshot{Entries: []Entry{ent("db.x", "10.0.0.2")}, Zones: []string{"cluster.local"}})
	r.Update("file", Snapshot{Entries: []Entry{ent("DB.x.", "10.0.0.1", "b", "a", "a"), ent("only.x", "10.0.0.3")}, Zones: []string{"x."}})
	m := await(t, r, ch, 0)
	want := map[string][]string{
		"db.x":   {"file:10.0.0.1", "kubernetes:10.0.0.2"}, // sources in name order
		"only.x": {"file:10.0.0.3"},
	}
	if diff := cmp.Diff(want, ips(m)); diff != "" {
		t.Errorf("names (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"cluster.local", "x"}, m.Zones); diff != "" {
		t.Errorf("zones (-want +got):\n%s", diff)
	}
	c := m.Names["db.x"][0]
	if diff := cmp.Diff([]string{"a", "b"}, c.Namespaces); diff != "" {
		t.Errorf("namespaces (-want +got):\n%s", diff)
	}
	visible := map[string]bool{"a": c.VisibleTo("a"), "b": c.VisibleTo("b"), "c": c.VisibleTo("c")}
	if diff := cmp.Diff(map[string]bool{"a": true, "b": true, "c": false}, visible); diff != "" {
		t.Errorf("visibility (-want +got):\n%s", diff)
	}
}

// Unchanged entries keep their Candidate pointer across versions: views
// rely on it to find a one-entry change among 10,000 without comparing
// bytes.
func TestUnchangedCandidatesAreShared(t *testing.T) {
	r := run(t, Config{})
	ch := r.Subscribe()
	r.Update("file", Snapshot{Entries: []Entry{ent("a.x", "10.0.0.1"), ent("b.x", "10.0.0.2")}})
	m1 := await(t, r, ch, 0)
	r.Update("file", Snapshot{Entries: []Entry{ent("a.x", "10.0.0.1"), ent("b.x", "10.0.0.9")}})
	m2 := await(t, r, ch, m1.Version)
	if m1.Names["a.x"][0] != m2.Names["a.x"][0] {
		t.Error("unchanged a.x got a new candidate")
	}
	if m1.Names["b.x"][0] == m2.Names["b.x"][0] {
		t.Error("changed b.x kept its candidate")
	}
}

// published records when each version appears, as a duration since start
// on the bubble's clock, until ctx ends.
func published(ctx context.Context, r *Registry, start time.Time) func() []time.Duration {
	var (
		mu   sync.Mutex
		at   []time.Duration
		seen uint64
	)
	ch := r.Subscribe()
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-ch:
			}
			mu.Lock()
			// Time stands still while the bubble has work, so every version
			// published at this instant is seen at it.
			for m := r.Latest(); seen < m.Version; seen++ {
				at = append(at, time.Since(start))
			}
			mu.Unlock()
		}
	}()
	return func() []time.Duration {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(at)
	}
}

// TestDebounce runs the registry on synctest's fake clock, so the exact
// instant of every version is known: a burst waits Debounce after its last
// update, a trickle that never goes quiet still publishes every MaxDelay.
func TestDebounce(t *testing.T) {
	ms := func(ds ...int) []time.Duration {
		out := make([]time.Duration, len(ds))
		for i, d := range ds {
			out[i] = time.Duration(d) * time.Millisecond
		}
		return out
	}
	tests := []struct {
		name     string
		debounce time.Duration
		maxDelay time.Duration
		updates  int
		every    time.Duration
		want     []time.Duration // when each version is published
	}{
		{name: "burst folds into one", debounce: 50 * time.Millisecond, updates: 50, want: ms(50)},
		{name: "quiet period counts from the last update", debounce: 50 * time.Millisecond,
			updates: 3, every: 20 * time.Millisecond, want: ms(90)},
		// Updates at 0, 15, ..., 435ms never leave 40ms of quiet, so
		// MaxDelay closes a burst 100ms after its first update; the next
		// update opens the next burst, and the last burst ends 40ms after
		// the last update.
		{name: "endless trickle still publishes", debounce: 40 * time.Millisecond, maxDelay: 100 * time.Millisecond,
			updates: 30, every: 15 * time.Millisecond, want: ms(100, 205, 310, 415, 475)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := run(t, Config{Debounce: tc.debounce, MaxDelay: tc.maxDelay})
				start := time.Now()
				got := published(t.Context(), r, start)
				for i := range tc.updates {
					if i > 0 {
						time.Sleep(tc.every)
					}
					r.Update("file", Snapshot{Entries: []Entry{ent("a.x", "10.0.0.1")}, Changed: time.Now()})
				}
				time.Sleep(time.Second) // far past the last possible version
				synctest.Wait()
				if diff := cmp.Diff(tc.want, got()); diff != "" {
					t.Errorf("versions published at (-want +got):\n%s", diff)
				}
			})
		})
	}
}

// TestExpectHoldsFirstVersion checks, on synctest's fake clock, that no
// version is published while an expected source has not reported, however
// long it takes, and that the programming latency still counts from the
// first change.
func TestExpectHoldsFirstVersion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := run(t, Config{Debounce: 10 * time.Millisecond, Expect: []string{"file", "kubernetes"}})
		ch := r.Subscribe()
		early := time.Now().Add(-time.Second)
		r.Update("file", Snapshot{Entries: []Entry{ent("a.x", "10.0.0.1")}, Changed: early})
		// Ten debounce periods: the build ran and held the version back.
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		if m := r.Latest(); m != nil {
			t.Fatalf("published version %d before kubernetes reported", m.Version)
		}
		r.Update("kubernetes", Snapshot{})
		m := await(t, r, ch, 0)
		if len(m.Names) != 1 {
			t.Errorf("names = %v", m.Names)
		}
		if !m.Changed.Equal(early) {
			t.Errorf("Changed = %v, want %v", m.Changed, early)
		}
	})
}

func TestDropsEntriesWithoutHostname(t *testing.T) {
	r := run(t, Config{})
	ch := r.Subscribe()
	r.Update("file", Snapshot{Entries: []Entry{ent("", "10.0.0.1"), ent(".", "10.0.0.2"), ent("bad\xff.x", "10.0.0.4"), ent("ok.x", "10.0.0.3")}})
	m := await(t, r, ch, 0)
	if diff := cmp.Diff(map[string][]string{"ok.x": {"file:10.0.0.3"}}, ips(m)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
