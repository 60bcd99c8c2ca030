package policysource

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshdns/meshdns/pkg/policy"
)

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil { // as editors and ConfigMap volumes replace files
		t.Fatal(err)
	}
}

// TestFile: a policy folder is followed; a bad file at start holds the
// first snapshot, a bad version later keeps the file's last good
// policies, a removed file's policies go.
func TestFile(t *testing.T) {
	dir := t.TempDir()
	good := "apiVersion: meshdns.io/v1alpha1\nkind: DNSPolicy\nmetadata: {name: a, namespace: shop}\nspec: {rules: [{pattern: a.example, action: Deny}]}\n"
	bad := "apiVersion: meshdns.io/v1alpha1\nkind: DNSPolicy\nmetadata: {name: b, namespace: shop}\nspec: {rules: [{pattern: b.example, action: Maybe}]}\n"
	writeFile(t, filepath.Join(dir, "a.yaml"), good)
	writeFile(t, filepath.Join(dir, "b.yaml"), bad)
	writeFile(t, filepath.Join(dir, ".hidden.yaml"), bad)
	writeFile(t, filepath.Join(dir, "notes.txt"), "not a policy")

	store := NewStore()
	src, err := NewFile(FileConfig{Paths: []string{dir}, Store: store, Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	sk := newSink()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- src.Run(rctx, sk) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	// The good file applies at once; the bad one holds the snapshot.
	eventually(t, ctx, store, "first read", expect(store, "shop", "p", "shop/a requires [policy]"))
	select {
	case <-sk.got:
		t.Fatal("snapshot sent while b.yaml has no good version")
	default:
	}
	writeFile(t, filepath.Join(dir, "b.yaml"), "apiVersion: meshdns.io/v1alpha1\nkind: DNSPolicy\nmetadata: {name: b, namespace: shop}\nspec: {}\n")
	eventually(t, ctx, store, "fixed", expect(store, "shop", "p", "shop/a,shop/b requires [policy]"))
	select {
	case <-sk.got:
	case <-ctx.Done():
		t.Fatal("no snapshot once every file is good")
	}

	writeFile(t, filepath.Join(dir, "a.yaml"), bad)
	writeFile(t, filepath.Join(dir, "c.yaml"), "apiVersion: meshdns.io/v1alpha1\nkind: DNSPolicy\nmetadata: {name: c, namespace: web}\nspec: {}\n")
	eventually(t, ctx, store, "new file", expect(store, "web", "p", "web/c requires [policy]"))
	if got := policyOf(store, "shop", "p"); got != "shop/a,shop/b requires [policy]" {
		t.Errorf("after a bad version of a.yaml: %q, want its last good policy kept", got)
	}

	if err := os.Remove(filepath.Join(dir, "b.yaml")); err != nil {
		t.Fatal(err)
	}
	eventually(t, ctx, store, "removed", expect(store, "shop", "p", "shop/a requires [policy]"))
}

// syncBuffer is a log sink the source's goroutine writes and the test
// reads.
type syncBuffer struct {
	mu    sync.Mutex // guards b
	b     strings.Builder
	wrote chan struct{} // capacity 1: written since the last wait
}

func newSyncBuffer() *syncBuffer { return &syncBuffer{wrote: make(chan struct{}, 1)} }

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case s.wrote <- struct{}{}:
	default:
	}
	return s.b.Write(p)
}

// wait waits, write by write, until the log holds text.
func (s *syncBuffer) wait(t *testing.T, ctx context.Context, text string) {
	t.Helper()
	for !strings.Contains(s.String(), text) {
		select {
		case <-s.wrote:
		case <-ctx.Done():
			t.Fatalf("the log never said %q:\n%s", text, s.String())
		}
	}
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestFileLimits: a policy file over the CRD's limits (too many rules, or
// too large to read) is rejected with the limit in the log, and the file's
// last good policies stay; policies of a folder whose namespace's rules
// together go over the limit are refused newest first.
func TestFileLimits(t *testing.T) {
	dir := t.TempDir()
	a := filepath.Join(dir, "a.yaml")
	writeFile(t, a, policyYAML("a", 3, 0))
	logs := newSyncBuffer()
	store := NewStore()
	src, err := NewFile(FileConfig{Paths: []string{dir}, Store: store, Interval: time.Hour,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- src.Run(rctx, newSink()) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	eventually(t, ctx, store, "first read", expect(store, "shop", "p", "shop/a requires [policy]"))

	// Each bad version of a.yaml is followed by a new file in another
	// namespace: once that is in, a.yaml's bad version was read too.
	for i, bad := range []struct{ name, data, log string }{
		{"too many rules", policyYAML("a", policy.MaxRules+1, 0), "policy has 10001 rules, more than the limit of 10000"},
		{"too large", policyYAML("a", 300_000, 0), fmt.Sprintf("more than the limit of %d bytes", MaxFileSize)},
	} {
		writeFile(t, a, bad.data)
		ns := fmt.Sprintf("web%d", i)
		writeFile(t, filepath.Join(dir, ns+".yaml"), "apiVersion: meshdns.io/v1alpha1\nkind: DNSPolicy\nmetadata: {name: w, namespace: "+ns+"}\nspec: {}\n")
		eventually(t, ctx, store, bad.name, expect(store, ns, "p", ns+"/w requires [policy]"))
		if p := fillSettings(store, "shop", "p"); p.GetSource() != "shop/a" || len(p.GetRules()) != 3 {
			t.Errorf("%s: pod sent %q with %d rules, want the last good shop/a with 3", bad.name, p.GetSource(), len(p.GetRules()))
		}
		logs.wait(t, ctx, bad.log) // the limit, named
	}

	// Two good files whose policies of one namespace come to more than
	// the limit: the newer is refused, and says so.
	writeFile(t, a, sizedYAML("shop", "a", 6000, 1))
	writeFile(t, filepath.Join(dir, "b.yaml"), sizedYAML("shop", "b", 6000, 2))
	eventually(t, ctx, store, "budget", func() string {
		if _, ok := store.Refused(FileOrigin)["shop/b"]; !ok {
			return "shop/b not refused"
		}
		if p := fillSettings(store, "shop", "p"); p.GetSource() != "shop/a" || len(p.GetRules()) != 6000 {
			return fmt.Sprintf("pod sent %q with %d rules", p.GetSource(), len(p.GetRules()))
		}
		return ""
	})
	logs.wait(t, ctx, "DNSPolicy shop/b: its 6000 rules and the 6000 of the older policies")
}
