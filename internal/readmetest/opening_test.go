package readmetest

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// openingPending are packages whose READMEs do not open as the test asks
// yet; none today.
var openingPending = map[string]bool{}

// TestPackageREADMEsOpen: the README of every package (a folder with Go
// code besides tests) opens, under "## Name", with a paragraph saying what
// the package is for and one beginning "May import" saying what it may
// import, so a reader learns both before the details (docs/design.md,
// Layout; internal/archtest enforces the arrows).
func TestPackageREADMEsOpen(t *testing.T) {
	root := filepath.Join("..", "..")
	seen := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		readme, err := os.ReadFile(filepath.Join(path, "README.md"))
		if err != nil || !hasPackageCode(t, path) || openingPending[rel] {
			return nil
		}
		seen++
		if why := openingProblem(string(readme)); why != "" {
			t.Errorf("%s/README.md: %s", rel, why)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen < 10 {
		t.Fatalf("found %d package READMEs under %s; the walk is broken", seen, root)
	}
}

// hasPackageCode reports whether dir holds a Go file other than a test.
func hasPackageCode(t *testing.T, dir string) bool {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if !strings.HasSuffix(n, "_test.go") {
			return true
		}
	}
	return false
}

// openingProblem says what the opening of readme lacks, or "".
func openingProblem(readme string) string {
	_, name, ok := strings.Cut(readme, "\n## Name\n")
	if !ok {
		return `no "## Name" section`
	}
	if pre, _, _ := strings.Cut(readme, "\n## Name\n"); strings.Contains(pre, "\n## ") {
		return `"## Name" is not the first section`
	}
	name, _, _ = strings.Cut(name, "\n## ")
	paras := paragraphs(name)
	switch {
	case len(paras) == 0 || len(strings.Fields(paras[0])) < 5:
		return "the Name section does not open with a paragraph saying what the package is for"
	case strings.HasPrefix(paras[0], "May import"):
		return `the Name section opens with "May import" instead of what the package is for`
	}
	for _, p := range paras[1:] {
		if strings.HasPrefix(p, "May import") && len(strings.Fields(p)) >= 4 {
			return ""
		}
	}
	return `the Name section has no paragraph beginning "May import" saying what the package may import`
}

// paragraphs splits text at blank lines, trimmed, without empty ones.
func paragraphs(text string) []string {
	var out []string
	for _, p := range strings.Split(text, "\n\n") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// TestOpeningProblem: what the opening check accepts and what it names.
func TestOpeningProblem(t *testing.T) {
	for _, tc := range []struct {
		name, readme, want string
	}{
		{name: "purpose then imports", want: "",
			readme: "# p\n\n## Name\n\n*p* - serves the things to the others.\n\nMay import: the standard library only.\n\n## Description\n"},
		{name: "no Name section", want: `no "## Name" section`,
			readme: "# p\n\n## Description\n\nMay import: the standard library only.\n"},
		{name: "Name not first", want: `"## Name" is not the first section`,
			readme: "# p\n\n## Usage\n\nx\n\n## Name\n\n*p* - serves the things to the others.\n\nMay import: the standard library only.\n"},
		{name: "no purpose", want: "the Name section does not open with a paragraph saying what the package is for",
			readme: "# p\n\n## Name\n\n*p*\n\nMay import: the standard library only.\n"},
		{name: "imports first", want: `the Name section opens with "May import" instead of what the package is for`,
			readme: "# p\n\n## Name\n\nMay import: the standard library only.\n\n*p* - serves the things to the others.\n"},
		{name: "no imports", want: `the Name section has no paragraph beginning "May import" saying what the package may import`,
			readme: "# p\n\n## Name\n\n*p* - serves the things to the others.\n\n## Description\n\nMay import: the standard library only.\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := openingProblem(tc.readme); got != tc.want {
				t.Errorf("openingProblem = %q, want %q", got, tc.want)
			}
		})
	}
}
