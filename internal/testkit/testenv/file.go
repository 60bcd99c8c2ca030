package testenv

import (
	"testing"

	"github.com/meshdns/meshdns/internal/atomicfile"
)

// ReplaceFile replaces path with content (mode 0644) the way editors,
// config management and ConfigMap updates do: a new file renamed over the
// old one (internal/atomicfile; the temporary file is hidden, so folder
// watchers skip it), so a reader never sees half of it.
func ReplaceFile(t testing.TB, path, content string) {
	t.Helper()
	if err := atomicfile.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
