package iptables

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/meshdns/meshdns/internal/testkit/netnstest"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

// newNetns creates an empty network namespace for one test and deletes it
// when the test ends. It returns a Runner that runs commands inside it.
func newNetns(t testing.TB) (string, ExecRunner) {
	t.Helper()
	name := netnstest.New(t, "mdipt")
	return name, ExecRunner{Prefix: []string{"ip", "netns", "exec", name}}
}

// mustRun runs a command in the namespace and fails the test on error.
// Writers pass --wait: the legacy xtables lock is shared by every namespace
// on the host, and other tests may hold it.
func mustRun(t testing.TB, r Runner, stdin string, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var in []byte
	if stdin != "" {
		in = []byte(stdin)
	}
	out, err := r.Run(ctx, in, name, args...)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

var counters = regexp.MustCompile(`\[\d+:\d+\]`)

// saveAll returns iptables-save output of both families without comment
// lines and with counters zeroed, for before/after comparisons.
func saveAll(t testing.TB, r Runner, b Backend) string {
	t.Helper()
	var out strings.Builder
	for _, f := range []Family{IPv4, IPv6} {
		for _, line := range strings.Split(mustRun(t, r, "", b.binary(f, "save")), "\n") {
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			out.WriteString(f.String() + " " + counters.ReplaceAllString(line, "[0:0]") + "\n")
		}
	}
	return out.String()
}

// foreignRules are another tool's rules in the tables we touch; clean must
// leave them exactly as they were.
const foreignRules = `*raw
:FOREIGN - [0:0]
-A OUTPUT -p udp -m udp --dport 123 -j FOREIGN
-A FOREIGN -j CT --notrack
COMMIT
*nat
:FOREIGN - [0:0]
-A OUTPUT -p tcp -m tcp --dport 8080 -j FOREIGN
-A FOREIGN -p tcp -j REDIRECT --to-ports 9090
COMMIT
`

// TestApplyCleanNetns runs apply, apply, check, drift repair and clean
// with the real iptables tools of both backends in a private network
// namespace.
func TestApplyCleanNetns(t *testing.T) {
	for _, b := range []Backend{Legacy, NFT} {
		t.Run(string(b), func(t *testing.T) {
			testenv.RequireTool(t, b.binary(IPv4, "restore"))
			testenv.RequireTool(t, b.binary(IPv6, "restore"))
			_, r := newNetns(t)
			for _, f := range []Family{IPv4, IPv6} {
				mustRun(t, r, foreignRules, b.binary(f, "restore"), "--noflush", "--wait=10")
			}
			before := saveAll(t, r, b)

			m, err := New(Config{
				ProxyUIDs:   []uint32{1337},
				ProxyGIDs:   []uint32{1337},
				Nameservers: addrs("198.18.0.1", "fd00:198:18::1"),
				Backend:     b,
				Runner:      r,
			})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()

			if err := m.Apply(ctx); err != nil {
				t.Fatalf("first apply: %v", err)
			}
			first := saveAll(t, r, b)
			if err := m.Apply(ctx); err != nil {
				t.Fatalf("second apply: %v", err)
			}
			second := saveAll(t, r, b)
			if diff := cmp.Diff(first, second); diff != "" {
				t.Errorf("second apply changed the rules (-first +second):\n%s", diff)
			}
			checkOneCopy(t, second, m)
			if !strings.Contains(second, "-A OUTPUT -p tcp -m tcp --dport 8080 -j FOREIGN") {
				t.Errorf("apply removed a foreign rule:\n%s", second)
			}
			if d, err := m.Diff(ctx); err != nil || len(d) != 0 {
				t.Errorf("Diff after apply = %q, %v; want none", d, err)
			}

			// Drift: a rule of ours deleted and a second jump added behind
			// our back; the reconciler sees it and repairs it.
			mustRun(t, r, "", strings.TrimSuffix(b.binary(IPv4, "x"), "-x"), "-w", "10", "-t", "nat", "-D", chainRedirect, "1")
			mustRun(t, r, "", strings.TrimSuffix(b.binary(IPv6, "x"), "-x"), "-w", "10", "-t", "raw", "-A", "OUTPUT",
				"-m", "comment", "--comment", "meshdns conntrack zones for DNS queries", "-j", chainOutput)
			drift, err := m.Check(ctx)
			if err != nil || !drift {
				t.Fatalf("Check after tampering = %v, %v; want drift", drift, err)
			}
			d, _ := m.Diff(ctx)
			if len(d) != 2 {
				t.Errorf("Diff after tampering = %q, want 2 differences", d)
			}
			rec, err := NewReconciler(ReconcilerConfig{Manager: m, Repair: true})
			if err != nil {
				t.Fatal(err)
			}
			if drift, err := rec.Reconcile(ctx); err != nil || !drift {
				t.Fatalf("Reconcile = %v, %v; want drift repaired", drift, err)
			}
			if diff := cmp.Diff(second, saveAll(t, r, b)); diff != "" {
				t.Errorf("repair did not restore the rules (-want +got):\n%s", diff)
			}
			if drift, _ := m.Check(ctx); drift {
				t.Errorf("drift after repair")
			}

			if err := m.Clean(ctx); err != nil {
				t.Fatalf("clean: %v", err)
			}
			if diff := cmp.Diff(before, saveAll(t, r, b)); diff != "" {
				t.Errorf("clean did not restore the original rules (-before +after):\n%s", diff)
			}
			if err := m.Clean(ctx); err != nil {
				t.Fatalf("second clean: %v", err)
			}
			if steps, err := m.PlanClean(ctx); err != nil || len(steps) != 0 {
				t.Errorf("PlanClean after clean = %d steps, %v; want none", len(steps), err)
			}
		})
	}
}

// checkOneCopy fails unless every rule of ours appears exactly once in the
// saved ruleset.
func checkOneCopy(t testing.TB, saved string, m *Manager) {
	t.Helper()
	for _, f := range []Family{IPv4, IPv6} {
		rs := m.Ruleset(f)
		var want []Rule
		want = append(want, rs.Jumps...)
		for _, c := range rs.Chains {
			want = append(want, c.Rules...)
		}
		for _, r := range want {
			line := f.String() + " -A " + r.Chain + " " + r.Spec() + "\n"
			if n := strings.Count(saved, line); n != 1 {
				t.Errorf("%q present %d times, want 1", line, n)
			}
		}
	}
}

// TestDetectNetns checks backend detection against real tools: an empty
// namespace gets nft, one where legacy holds rules gets legacy.
func TestDetectNetns(t *testing.T) {
	testenv.RequireTool(t, "iptables-legacy")
	testenv.RequireTool(t, "iptables-nft")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	_, r := newNetns(t)
	if b, err := Detect(ctx, r); err != nil || b != NFT {
		t.Errorf("Detect(empty) = %q, %v; want nft", b, err)
	}
	mustRun(t, r, "", "iptables-legacy", "-w", "10", "-t", "nat", "-A", "OUTPUT", "-p", "tcp", "--dport", "8080", "-j", "RETURN")
	if b, err := Detect(ctx, r); err != nil || b != Legacy {
		t.Errorf("Detect(legacy rule) = %q, %v; want legacy", b, err)
	}
}
