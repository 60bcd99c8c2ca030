package readmetest

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestDocumentedMetrics(t *testing.T) {
	path := filepath.Join(t.TempDir(), "README.md")
	readme := "# x\n\nMentions `meshdns_outside_total` before.\n\n## Metrics\n\n" +
		"- `meshdns_b_total{rcode}`: counted.\n| `meshdns_a_seconds` | histogram |\nagain `meshdns_b_total`\n" +
		"\n## Examples\n\n`meshdns_after_total`\n"
	if err := os.WriteFile(path, []byte(readme), 0o644); err != nil {
		t.Fatal(err)
	}
	want := []string{"meshdns_a_seconds", "meshdns_b_total"}
	if diff := cmp.Diff(want, DocumentedMetrics(t, path, MetricName)); diff != "" {
		t.Errorf("(-want +got)\n%s", diff)
	}
	MetricsDocumented(t, path, MetricName, []string{"meshdns_b_total", "meshdns_a_seconds"})
	rows := regexp.MustCompile("(?m)^\\| `(meshdns_[a-z_]+)`")
	if diff := cmp.Diff([]string{"meshdns_a_seconds"}, DocumentedMetrics(t, path, rows)); diff != "" {
		t.Errorf("table rows only (-want +got)\n%s", diff)
	}
}
