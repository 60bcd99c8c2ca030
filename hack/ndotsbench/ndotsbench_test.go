package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestMain lets the test binary serve as the relay that run starts with
// os.Executable.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "relay" {
		if err := relayMain(os.Args[2:]); err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		return
	}
	os.Exit(m.Run())
}

func TestQueryName(t *testing.T) {
	for _, tc := range []struct {
		name, line, want string
		ok               bool
	}{
		{name: "query", line: `[INFO] 127.0.0.1:40000 - 1 "AAAA IN www.example.com.cluster.local. udp 44 false 512" NXDOMAIN qr,aa,rd 120 0.0001s`, want: "www.example.com.cluster.local.", ok: true},
		{name: "start banner", line: `CoreDNS-1.12.1`},
		{name: "other quote", line: `[WARNING] "no" reason`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := queryName(tc.line)
			if got != tc.want || ok != tc.ok {
				t.Errorf("queryName = %q, %v, want %q, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

// TestSearchWalk runs the benchmark for a few lookups and checks the
// query counts it reports, which do not depend on the machine's speed:
// the walk sends A and AAAA for the three search-path names and the name
// itself to the cluster DNS; the agent answers the search-path names from
// its table and forwards only the name itself, once while its cache holds
// the answer. Then nothing it made is left.
func TestSearchWalk(t *testing.T) {
	needRoot(t, "ip", "dig", "gcc", "musl-gcc")
	coreDNS := filepath.Join(os.Getenv("HOME"), ".cache/meshdns/coredns/coredns")
	if _, err := os.Stat(coreDNS); err != nil {
		t.Fatalf("no CoreDNS (make deps builds it): %v", err)
	}
	agent := filepath.Join(t.TempDir(), "meshdns-agent")
	if out, err := exec.Command("go", "build", "-o", agent, "../../cmd/meshdns-agent").CombinedOutput(); err != nil {
		t.Fatalf("build the agent: %v\n%s", err, out)
	}
	cfg := config{count: 3, delay: "1ms", coreDNS: coreDNS, meshdns: agent,
		table: "../../examples/nametable.json", name: "www.example.com", timeout: 5 * time.Minute}
	rows, err := run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	type counts struct {
		Setup, Libc string
		First       int
		PerLookup   float64
	}
	var got, want []counts
	for _, r := range rows {
		got = append(got, counts{r.setup, r.libc, r.firstQueries, r.queriesPerRun})
	}
	for _, s := range []struct {
		setup     string
		first     int
		perLookup float64
	}{{"without meshdns", 8, 8}, {"meshdns, cache off", 2, 2}, {"meshdns", 2, 0}} {
		for _, libc := range []string{"glibc", "musl"} {
			want = append(want, counts{s.setup, libc, s.first, s.perLookup})
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("queries reaching CoreDNS (-want +got):\n%s", diff)
	}
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		t.Fatal(err)
	}
	tp := newTopology()
	for _, left := range []string{tp.pod, tp.dns} {
		if strings.Contains(string(out), left) {
			t.Errorf("namespace %s left after the run", left)
		}
	}
	if exists(filepath.Dir(tp.resolv)) {
		t.Errorf("%s left after the run", filepath.Dir(tp.resolv))
	}
}

// needRoot skips outside CI, and fails in CI, without root or the tools.
func needRoot(t *testing.T, tools ...string) {
	t.Helper()
	missing := ""
	if os.Geteuid() != 0 {
		missing = "root"
	}
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			missing += " " + tool
		}
	}
	if missing == "" {
		return
	}
	if os.Getenv("CI") == "" {
		t.Skipf("needs %s (make deps installs the tools; runs in CI)", strings.TrimSpace(missing))
	}
	t.Fatalf("needs %s", strings.TrimSpace(missing))
}
