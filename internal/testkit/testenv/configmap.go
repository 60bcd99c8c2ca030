package testenv

import (
	"os"
	"path/filepath"
	"testing"
)

// UpdateConfigMapVolume writes files (name to content) into dir the way
// the kubelet updates a ConfigMap or downward API volume: the contents go
// to a new hidden version folder, the ..data symlink is pointed at it by
// renaming a new link over the old (one atomic step), each name is a
// symlink to ..data/name (made on first use), and the previous version
// folder is removed. The visible files themselves never change, so a
// watch on a file alone misses the update. Names are only added: one
// left out of a later update dangles, as a removed key does for a moment
// in a real volume.
func UpdateConfigMapVolume(t testing.TB, dir string, files map[string]string) {
	t.Helper()
	version, err := os.MkdirTemp(dir, "..version_")
	if err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(version, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	data := filepath.Join(dir, "..data")
	old, _ := os.Readlink(data) // none the first time
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(version), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, data); err != nil {
		t.Fatal(err)
	}
	for name := range files {
		link := filepath.Join(dir, name)
		if _, err := os.Lstat(link); os.IsNotExist(err) {
			if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
				t.Fatal(err)
			}
		}
	}
	if old != "" {
		if err := os.RemoveAll(filepath.Join(dir, old)); err != nil {
			t.Fatal(err)
		}
	}
}
