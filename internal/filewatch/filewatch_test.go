package filewatch_test

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/meshdns/meshdns/internal/filewatch"
	"github.com/meshdns/meshdns/internal/testkit/certtest"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// start runs filewatch.Run until the test ends and returns the number of
// Changed calls so far.
func start(t *testing.T, cfg filewatch.Config) *atomic.Int64 {
	t.Helper()
	var n atomic.Int64
	cfg.Changed = func() { n.Add(1) }
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := filewatch.Run(ctx, cfg); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })
	return &n
}

// replace writes data beside path and renames it over path, as editors
// and volume updates do.
func replace(t *testing.T, path, data string) {
	t.Helper()
	certtest.Write(t, filepath.Dir(path), filepath.Base(path), []byte(data))
}

func TestRun(t *testing.T) {
	tests := []struct {
		name string
		// setup returns the paths to follow and a change to make.
		setup    func(t *testing.T, dir string) ([]string, func())
		interval time.Duration
	}{
		{
			name: "file replaced by rename, seen by events (the poll is an hour)",
			setup: func(t *testing.T, dir string) ([]string, func()) {
				p := filepath.Join(dir, "table.json")
				replace(t, p, "a")
				return []string{p}, func() { replace(t, p, "bb") }
			},
			interval: time.Hour,
		},
		{
			name: "ConfigMap symlink swap, seen by events",
			setup: func(t *testing.T, dir string) ([]string, func()) {
				for _, v := range []string{"v1", "v2"} {
					if err := os.Mkdir(filepath.Join(dir, v), 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(filepath.Join(dir, v, "entries.yaml"), []byte(v), 0o644); err != nil {
						t.Fatal(err)
					}
				}
				if err := os.Symlink("v1", filepath.Join(dir, "..data")); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink("..data/entries.yaml", filepath.Join(dir, "entries.yaml")); err != nil {
					t.Fatal(err)
				}
				return []string{filepath.Join(dir, "entries.yaml")}, func() {
					if err := os.Symlink("v2", filepath.Join(dir, "..data_tmp")); err != nil {
						t.Fatal(err)
					}
					if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
						t.Fatal(err)
					}
				}
			},
			interval: time.Hour,
		},
		{
			name: "file in a folder that does not exist yet, seen by the poll",
			setup: func(t *testing.T, dir string) ([]string, func()) {
				sub := filepath.Join(dir, "later", "deeper")
				return []string{filepath.Join(sub, "tls.crt")}, func() {
					if err := os.MkdirAll(sub, 0o755); err != nil {
						t.Fatal(err)
					}
					replace(t, filepath.Join(sub, "tls.crt"), "cert")
				}
			},
			interval: 20 * time.Millisecond,
		},
		{
			name: "new file in a followed folder",
			setup: func(t *testing.T, dir string) ([]string, func()) {
				return []string{dir}, func() { replace(t, filepath.Join(dir, "more.yaml"), "x") }
			},
			interval: time.Hour,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			paths, change := tc.setup(t, dir)
			n := start(t, filewatch.Config{Paths: paths, Interval: tc.interval, Settle: 5 * time.Millisecond})
			// The first call says the watches are in place.
			testenv.Eventually(t, "Changed at the start", 5*time.Second, func() bool { return n.Load() == 1 })
			time.Sleep(30 * time.Millisecond)
			if got := n.Load(); got != 1 {
				t.Fatalf("Changed called %d times before any change, want 1 (the start)", got)
			}
			change()
			testenv.Eventually(t, "Changed after the change", 5*time.Second, func() bool { return n.Load() > 1 })
		})
	}
}

// An unchanged file is not reported by the poll, however often it runs.
func TestRunQuietWhenUnchanged(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	replace(t, p, "same")
	n := start(t, filewatch.Config{Paths: []string{p}, Interval: 5 * time.Millisecond})
	time.Sleep(100 * time.Millisecond)
	if got := n.Load(); got != 1 {
		t.Errorf("Changed called %d times for an unchanged file, want 1 (the start)", got)
	}
}

func TestStamp(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	missing := filewatch.Stamp(p)
	replace(t, p, "one")
	one := filewatch.Stamp(p)
	if one == missing {
		t.Error("creating the file left the stamp alone")
	}
	if filewatch.Stamp(p) != one {
		t.Error("stamp changed without a change")
	}
	replace(t, p, "two")
	if filewatch.Stamp(p) == one {
		t.Error("replacing the file with same-size content left the stamp alone (the inode changed)")
	}
	folder := filewatch.Stamp(dir)
	if err := os.WriteFile(p, []byte("three!"), 0o644); err != nil {
		t.Fatal(err)
	}
	if filewatch.Stamp(dir) == folder {
		t.Error("rewriting a file of the folder left the folder's stamp alone")
	}
}

func TestRunConfigErrors(t *testing.T) {
	ctx := context.Background()
	if err := filewatch.Run(ctx, filewatch.Config{Changed: func() {}}); err == nil {
		t.Error("Run accepted no paths")
	}
	if err := filewatch.Run(ctx, filewatch.Config{Paths: []string{"x"}}); err == nil {
		t.Error("Run accepted no Changed")
	}
}

// BenchmarkStamp is the cost certfile adds to every TLS handshake (three
// files) and Run to every poll.
func BenchmarkStamp(b *testing.B) {
	dir := b.TempDir()
	var paths []string
	for _, n := range []string{"tls.crt", "tls.key", "ca.crt"} {
		paths = append(paths, certtest.Write(b, dir, n, []byte(n)))
	}
	b.ReportAllocs()
	for b.Loop() {
		filewatch.Stamp(paths...)
	}
}
