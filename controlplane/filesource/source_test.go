package filesource

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/meshdns/meshdns/controlplane/registry"
	"github.com/meshdns/meshdns/controlplane/vip"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// sink records snapshots.
type sink struct{ ch chan registry.Snapshot }

func (s *sink) Update(_ string, snap registry.Snapshot) { s.ch <- snap }

// next waits for a snapshot and returns hostname -> first IP.
func (s *sink) next(t *testing.T) map[string]string {
	t.Helper()
	select {
	case snap := <-s.ch:
		out := map[string]string{}
		for _, e := range snap.Entries {
			ip := ""
			if len(e.IPs) > 0 {
				ip = e.IPs[0].String()
			}
			out[e.Hostname] = ip
		}
		return out
	case <-time.After(5 * time.Second):
		t.Fatal("no snapshot within 5s")
	}
	return nil
}

func (s *sink) none(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case snap := <-s.ch:
		t.Fatalf("unexpected snapshot with %d entries", len(snap.Entries))
	case <-time.After(d):
	}
}

type running struct {
	src  *Source
	sink *sink
	prom *prometheus.Registry
	stop func() // cancels Run and waits for it; idempotent
}

func start(t *testing.T, cfg Config) *running {
	t.Helper()
	prom := prometheus.NewRegistry()
	cfg.Registerer = prom
	if cfg.Resync == 0 {
		cfg.Resync = time.Hour // prove that events, not resyncs, reload
	}
	src, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	sk := &sink{ch: make(chan registry.Snapshot, 16)}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = src.Run(ctx, sk) }()
	stop := sync.OnceFunc(func() { cancel(); wg.Wait() })
	t.Cleanup(stop)
	return &running{src: src, sink: sk, prom: prom, stop: stop}
}

func write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestReloadOnWriteAndRename(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "entries.yaml")
	write(t, file, "entries: [{hostname: a.x, addresses: [10.0.0.1]}]")
	r := start(t, Config{Paths: []string{file}})
	if diff := cmp.Diff(map[string]string{"a.x": "10.0.0.1"}, r.sink.next(t)); diff != "" {
		t.Fatalf("initial (-want +got):\n%s", diff)
	}

	steps := []struct {
		name   string
		change func()
		want   map[string]string
	}{
		{
			name:   "write in place",
			change: func() { write(t, file, "entries: [{hostname: a.x, addresses: [10.0.0.2]}]") },
			want:   map[string]string{"a.x": "10.0.0.2"},
		},
		{
			name: "rename over (how editors save)",
			change: func() {
				tmp := filepath.Join(dir, ".entries.yaml.swp")
				write(t, tmp, "entries: [{hostname: a.x, addresses: [10.0.0.3]}, {hostname: b.x, addresses: [10.0.0.4]}]")
				if err := os.Rename(tmp, file); err != nil {
					t.Fatal(err)
				}
			},
			want: map[string]string{"a.x": "10.0.0.3", "b.x": "10.0.0.4"},
		},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			s.change()
			if diff := cmp.Diff(s.want, r.sink.next(t)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestConfigMapSwap mimics the kubelet's atomic writer: keys are symlinks
// to ..data/<key>, and ..data is a symlink to a timestamped folder that is
// replaced by renaming a new symlink over it.
func TestConfigMapSwap(t *testing.T) {
	mount := t.TempDir()
	version := func(name, data string) {
		d := filepath.Join(mount, name)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(d, "entries.yaml"), data)
	}
	version("..2024_01_01_00_00_00.1", "entries: [{hostname: cm.x, addresses: [10.0.0.1]}]")
	if err := os.Symlink("..2024_01_01_00_00_00.1", filepath.Join(mount, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("..data/entries.yaml", filepath.Join(mount, "entries.yaml")); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		path string
	}{
		{name: "folder", path: mount},
		{name: "file", path: filepath.Join(mount, "entries.yaml")},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := start(t, Config{Paths: []string{tc.path}})
			first := r.sink.next(t)
			if len(first) != 1 {
				t.Fatalf("initial: %v (hidden ..data must not be read twice)", first)
			}
			ts := "..2024_01_02_00_00_00." + string(rune('a'+i))
			ip := "10.0.1." + string(rune('1'+i))
			version(ts, "entries: [{hostname: cm.x, addresses: ["+ip+"]}]")
			tmp := filepath.Join(mount, "..data_tmp")
			if err := os.Symlink(ts, tmp); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, filepath.Join(mount, "..data")); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(map[string]string{"cm.x": ip}, r.sink.next(t)); diff != "" {
				t.Errorf("after swap (-want +got):\n%s", diff)
			}
		})
	}
}

func TestBadFileKeepsLastGood(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "a.yaml"), "entries: [{hostname: a.x, addresses: [10.0.0.1]}]")
	write(t, filepath.Join(dir, "b.yaml"), "entries: [{hostname: b.x, addresses: [10.0.0.2]}]")
	write(t, filepath.Join(dir, "notes.txt"), "not entries")
	r := start(t, Config{Paths: []string{dir}})
	if diff := cmp.Diff(map[string]string{"a.x": "10.0.0.1", "b.x": "10.0.0.2"}, r.sink.next(t)); diff != "" {
		t.Fatalf("initial (-want +got):\n%s", diff)
	}
	reloadErrors := func() float64 {
		mfs, _ := r.prom.Gather()
		for _, mf := range mfs {
			if mf.GetName() == "meshdns_controlplane_file_reload_errors_total" {
				return mf.GetMetric()[0].GetCounter().GetValue()
			}
		}
		return -1
	}

	// One bad entry in b.yaml: the whole file is rejected and keeps its
	// last good entries; nothing changes for the agents.
	write(t, filepath.Join(dir, "b.yaml"), "entries: [{hostname: b.x, addresses: [10.0.0.3]}, {hostname: c.x, addresses: [bogus]}]")
	r.sink.none(t, 300*time.Millisecond)
	if got := reloadErrors(); got != 1 {
		t.Errorf("reload errors = %v, want 1", got)
	}
	// a.yaml still reloads on its own.
	write(t, filepath.Join(dir, "a.yaml"), "entries: [{hostname: a.x, addresses: [10.0.0.9]}]")
	if diff := cmp.Diff(map[string]string{"a.x": "10.0.0.9", "b.x": "10.0.0.2"}, r.sink.next(t)); diff != "" {
		t.Errorf("after a.yaml change (-want +got):\n%s", diff)
	}
	// Fixing b.yaml applies it.
	write(t, filepath.Join(dir, "b.yaml"), "entries: [{hostname: b.x, addresses: [10.0.0.3]}]")
	if diff := cmp.Diff(map[string]string{"a.x": "10.0.0.9", "b.x": "10.0.0.3"}, r.sink.next(t)); diff != "" {
		t.Errorf("after fix (-want +got):\n%s", diff)
	}
	// Removing a file removes its names.
	if err := os.Remove(filepath.Join(dir, "a.yaml")); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]string{"b.x": "10.0.0.3"}, r.sink.next(t)); diff != "" {
		t.Errorf("after remove (-want +got):\n%s", diff)
	}
}

// TestNothingUntilLoaded: a path that is missing, empty or invalid at start
// holds the first snapshot (the registry waits for it, so no agent gets a
// table without that file's names) until it has a good version.
func TestNothingUntilLoaded(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, dir string) // leaves dir/a.yaml missing or bad
	}{
		{name: "missing file", setup: func(*testing.T, string) {}},
		{name: "empty file", setup: func(t *testing.T, dir string) { write(t, filepath.Join(dir, "a.yaml"), "") }},
		{name: "whitespace", setup: func(t *testing.T, dir string) { write(t, filepath.Join(dir, "a.yaml"), "\n  \n") }},
		{name: "invalid file", setup: func(t *testing.T, dir string) {
			write(t, filepath.Join(dir, "a.yaml"), "entries: [{hostname: a.x, addresses: [nope]}]")
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			good := filepath.Join(dir, "good")
			if err := os.Mkdir(good, 0o755); err != nil {
				t.Fatal(err)
			}
			write(t, filepath.Join(good, "b.yaml"), "entries: [{hostname: b.x, addresses: [10.0.0.2]}]")
			tc.setup(t, dir)
			file := filepath.Join(dir, "a.yaml")
			r := start(t, Config{Paths: []string{good, file}})
			r.sink.none(t, 200*time.Millisecond)
			if got := testutil.ToFloat64(r.src.m.loaded); got != 0 {
				t.Errorf("meshdns_controlplane_file_loaded = %v before every path loaded", got)
			}
			write(t, file, "entries: []")
			if diff := cmp.Diff(map[string]string{"b.x": "10.0.0.2"}, r.sink.next(t)); diff != "" {
				t.Errorf("once loaded (-want +got):\n%s", diff)
			}
			if got := testutil.ToFloat64(r.src.m.loaded); got != 1 {
				t.Errorf("meshdns_controlplane_file_loaded = %v, want 1", got)
			}
		})
	}
}

// TestStateSurvivesRestart: with a state directory, a source restarted
// while its file is empty, invalid or gone serves the file's last good
// version from the state; a good file on disk wins over the state.
func TestStateSurvivesRestart(t *testing.T) {
	tests := []struct {
		name  string
		fault func(t *testing.T, file string)
		want  map[string]string
	}{
		{name: "empty file", fault: func(t *testing.T, f string) { write(t, f, "") }, want: map[string]string{"a.x": "10.0.0.1"}},
		{name: "invalid file", fault: func(t *testing.T, f string) { write(t, f, "entries: [{hostname: a.x, addresses: [10.0.0]}]") },
			want: map[string]string{"a.x": "10.0.0.1"}},
		{name: "file deleted", fault: func(t *testing.T, f string) {
			if err := os.Remove(f); err != nil {
				t.Fatal(err)
			}
		}, want: map[string]string{"a.x": "10.0.0.1"}},
		{name: "good new version", fault: func(t *testing.T, f string) { write(t, f, "entries: [{hostname: a.x, addresses: [10.0.0.7]}]") },
			want: map[string]string{"a.x": "10.0.0.7"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir, state := t.TempDir(), t.TempDir()
			file := filepath.Join(dir, "a.yaml")
			write(t, file, "entries: [{hostname: a.x, addresses: [10.0.0.1]}]")
			r := start(t, Config{Paths: []string{file}, StateDir: state})
			if diff := cmp.Diff(map[string]string{"a.x": "10.0.0.1"}, r.sink.next(t)); diff != "" {
				t.Fatalf("first run (-want +got):\n%s", diff)
			}
			r.stop()
			tc.fault(t, file)
			r = start(t, Config{Paths: []string{file}, StateDir: state})
			if diff := cmp.Diff(tc.want, r.sink.next(t)); diff != "" {
				t.Errorf("after restart (-want +got):\n%s", diff)
			}
			des, err := os.ReadDir(state)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, de := range des {
				names = append(names, de.Name())
			}
			if diff := cmp.Diff([]string{"filesource-file.json"}, names); diff != "" {
				t.Errorf("state dir (-want +got), no temporary files left:\n%s", diff)
			}
		})
	}
	t.Run("without a state dir the restart waits", func(t *testing.T) {
		dir := t.TempDir()
		file := filepath.Join(dir, "a.yaml")
		write(t, file, "")
		r := start(t, Config{Paths: []string{file}})
		r.sink.none(t, 200*time.Millisecond)
	})
	t.Run("a state from another configuration is not used", func(t *testing.T) {
		dir, other, state := t.TempDir(), t.TempDir(), t.TempDir()
		write(t, filepath.Join(other, "o.yaml"), "entries: [{hostname: o.x, addresses: [10.0.0.5]}]")
		r := start(t, Config{Paths: []string{other}, StateDir: state})
		r.sink.next(t)
		r.stop()
		write(t, filepath.Join(dir, "a.yaml"), "entries: []")
		r = start(t, Config{Paths: []string{dir}, StateDir: state})
		if diff := cmp.Diff(map[string]string{}, r.sink.next(t)); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	})
}

func TestVirtualIPs(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "e.yaml")
	write(t, file, "entries: [{hostname: v1.x}, {hostname: v2.x}, {hostname: real.x, addresses: [10.0.0.1]}]")
	alloc, err := vip.New([]netip.Prefix{netip.MustParsePrefix("240.240.0.0/16"), netip.MustParsePrefix("fd00:240::/48")})
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, Config{Paths: []string{file}, VIP: alloc})
	var snap registry.Snapshot
	select {
	case snap = <-r.sink.ch:
	case <-time.After(5 * time.Second):
		t.Fatal("no snapshot")
	}
	want, _ := alloc.Assign([]string{"v1.x", "v2.x"})
	got := map[string][]netip.Addr{}
	for _, e := range snap.Entries {
		if e.Hostname != "real.x" {
			got[e.Hostname] = e.IPs
		}
	}
	if diff := cmp.Diff(want, got, addrCmp); diff != "" {
		t.Errorf("VIPs (-want +got):\n%s", diff)
	}
	var fams []string
	for _, ip := range got["v1.x"] {
		if ip.Is4() {
			fams = append(fams, "v4")
		} else {
			fams = append(fams, "v6")
		}
	}
	sort.Strings(fams)
	if diff := cmp.Diff([]string{"v4", "v6"}, fams); diff != "" {
		t.Errorf("families (-want +got):\n%s", diff)
	}
}
