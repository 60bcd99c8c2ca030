package testenv

import (
	"os"
	"path/filepath"
	"testing"
)

func TestUpdateConfigMapVolume(t *testing.T) {
	dir := t.TempDir()
	UpdateConfigMapVolume(t, dir, map[string]string{"a.yaml": "one"})
	first, err := os.Readlink(filepath.Join(dir, "..data"))
	if err != nil {
		t.Fatal(err)
	}
	UpdateConfigMapVolume(t, dir, map[string]string{"a.yaml": "two", "b.yaml": "bee"})
	for name, want := range map[string]string{"a.yaml": "two", "b.yaml": "bee"} {
		if b, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(b) != want {
			t.Errorf("%s = %q, %v; want %q", name, b, err, want)
		}
		if target, err := os.Readlink(filepath.Join(dir, name)); err != nil || target != filepath.Join("..data", name) {
			t.Errorf("%s links to %q, %v; want through ..data", name, target, err)
		}
	}
	if _, err := os.Lstat(filepath.Join(dir, first)); !os.IsNotExist(err) {
		t.Errorf("previous version %s kept: %v", first, err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	// ..data, one version folder, two links; no ..data_tmp left.
	if len(ents) != 4 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("dir holds %v, want ..data, one version and two links", names)
	}
}
