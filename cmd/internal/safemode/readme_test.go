package safemode

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meshdns/meshdns/internal/metrics"
	"github.com/meshdns/meshdns/internal/readmetest"
)

// TestMetricsDocumented: agent/README.md's "Safe mode" section lists
// exactly the metrics safe mode registers (one list item each), named by the rules of
// docs/design.md. (The agent's Metrics section lists the agent's only:
// these are served by the supervisor.)
func TestMetricsDocumented(t *testing.T) {
	reg := metrics.NewRegistry()
	if _, err := newMetrics(reg); err != nil {
		t.Fatal(err)
	}
	readmetest.CheckNames(t, reg)
	b, err := os.ReadFile("../../../agent/README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n### Safe mode\n")
	if !ok {
		t.Fatal("agent/README.md has no Safe mode section")
	}
	section, _, _ = strings.Cut(section, "\n### ")
	var documented []string
	for _, m := range regexp.MustCompile("(?m)^ *- `(meshdns_agent_safe_mode[a-z_]*)").FindAllStringSubmatch(section, -1) {
		documented = append(documented, m[1])
	}
	slices.Sort(documented)
	if diff := cmp.Diff(readmetest.Registered(reg), slices.Compact(documented)); diff != "" {
		t.Errorf("agent/README.md Safe mode metrics (-registered +documented):\n%s", diff)
	}
}
