package testenv

import (
	"os"
	"path/filepath"
	"testing"
)

func TestReplaceFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "entries.yaml")
	ReplaceFile(t, p, "one")
	ReplaceFile(t, p, "two")
	b, err := os.ReadFile(p)
	if err != nil || string(b) != "two" {
		t.Fatalf("read = %q, %v; want two", b, err)
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644 (readable by a helper running as another uid)", fi.Mode().Perm())
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("dir holds %d files, want only the replaced one", len(ents))
	}
}
