package difftest

import (
	"os"
	"regexp"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestClassesDocumented keeps the allowed difference classes and the table
// of docs/coredns-differences.md the same list: a class the test allows
// without a documented reason, or a documented row no class matches, fails.
func TestClassesDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/coredns-differences.md")
	if err != nil {
		t.Fatal(err)
	}
	var documented []string
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z0-9-]+)` \\|").FindAllStringSubmatch(string(doc), -1) {
		documented = append(documented, m[1])
	}
	var allowed []string
	for _, c := range classes {
		allowed = append(allowed, c.name)
	}
	slices.Sort(documented)
	slices.Sort(allowed)
	if diff := cmp.Diff(allowed, documented); diff != "" {
		t.Errorf("difference classes (-compare_test.go +docs/coredns-differences.md):\n%s", diff)
	}
}
