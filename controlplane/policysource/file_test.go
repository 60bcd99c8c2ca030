package policysource

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
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
