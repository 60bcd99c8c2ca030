package atomicfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

func TestWriteFileReplaces(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "state.json")
	if err := WriteFile(p, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A reader holding the old file keeps reading the old content: the new
	// one is a different inode renamed over the name, not a rewrite.
	old, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if err := WriteFile(p, []byte("new content"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(old); string(b) != "old" {
		t.Errorf("open reader sees %q, want the old content", b)
	}
	b, err := os.ReadFile(p)
	if err != nil || string(b) != "new content" {
		t.Fatalf("read = %q, %v; want the new content", b, err)
	}
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o644 {
		t.Errorf("mode = %v, want 0644", fi.Mode().Perm())
	}
	assertOnly(t, dir, "state.json")
}

func TestWriteFailureKeepsOld(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "table.pb")
	if err := WriteFile(p, []byte("good"), 0o600); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := Write(p, 0o600, func(w io.Writer) error {
		w.Write([]byte("half"))
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want the writer's error wrapped", err)
	}
	if b, _ := os.ReadFile(p); string(b) != "good" {
		t.Errorf("after a failed write the file holds %q, want the old content", b)
	}
	assertOnly(t, dir, "table.pb")
}

func TestWriteMissingDir(t *testing.T) {
	p := filepath.Join(t.TempDir(), "gone", "f")
	if err := WriteFile(p, []byte("x"), 0o600); err == nil {
		t.Fatal("write into a missing directory: no error")
	}
}

// assertOnly fails unless dir holds exactly the named file: no temporary
// file is left behind.
func assertOnly(t *testing.T, dir, name string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 || ents[0].Name() != name {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("dir holds %q, want only %q", names, name)
	}
}
