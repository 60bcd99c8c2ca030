package iptables

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestStdlibOnly enforces the layering of docs/design.md (Layout): the iptables package runs in
// the init container and must not grow dependencies, DNS libraries least of
// all. Test files may use test helpers. The one exception is the shared
// resolv.conf parser, itself stdlib-only (internal/archtest checks that).
func TestStdlibOnly(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if path == "github.com/meshdns/meshdns/internal/resolvconf" {
				continue
			}
			// Standard library paths have no dot in their first element.
			if first, _, _ := strings.Cut(path, "/"); strings.Contains(first, ".") {
				t.Errorf("%s imports %s; package iptables may import the standard library only", name, path)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no Go files checked")
	}
}
