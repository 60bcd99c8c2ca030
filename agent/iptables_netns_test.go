package agent

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshdns/meshdns/internal/testkit/testenv"
	"github.com/meshdns/meshdns/iptables"
)

var netnsSeq atomic.Int32

// newNetns creates an empty network namespace for one test and deletes it
// when the test ends (as iptables/netns_test.go does). It returns a Runner
// that runs commands inside it.
func newNetns(t testing.TB) iptables.ExecRunner {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.RequireTool(t, "ip")
	name := fmt.Sprintf("mdagent-%d-%d", os.Getpid(), netnsSeq.Add(1))
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", name, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", name, err, out)
		}
	})
	return iptables.ExecRunner{Prefix: []string{"ip", "netns", "exec", name}}
}

// TestIPTablesDriftNetns applies the rules with the real iptables tools of
// both backends in a private network namespace, runs an agent whose check
// reads that namespace, deletes a rule behind its back and waits for the
// drift gauge; with repair, the rule must come back and the gauge stay 0.
func TestIPTablesDriftNetns(t *testing.T) {
	for _, b := range []iptables.Backend{iptables.Legacy, iptables.NFT} {
		for _, repair := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/repair=%v", b, repair), func(t *testing.T) {
				tool := "iptables-" + string(b)
				testenv.RequireTool(t, tool)
				testenv.RequireTool(t, tool+"-restore")
				testenv.RequireTool(t, "ip6tables-"+string(b)+"-restore")
				r := newNetns(t)
				rc := iptables.Config{
					ProxyUIDs:   []uint32{1337},
					ProxyGIDs:   []uint32{1337},
					Nameservers: []netip.Addr{netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("fd00:198:18::1")},
					Backend:     b,
					Runner:      r,
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				m, err := iptables.New(rc)
				if err != nil {
					t.Fatal(err)
				}
				if err := m.Apply(ctx); err != nil {
					t.Fatalf("apply: %v", err)
				}
				save := func() string {
					out, err := r.Run(ctx, nil, tool+"-save", "-t", "nat")
					if err != nil {
						t.Fatal(err)
					}
					return string(out)
				}
				const redirect = `-A MESHDNS_REDIRECT -p udp -m comment --comment "meshdns to the agent over udp" -j REDIRECT --to-ports 15053`
				if !strings.Contains(save(), redirect) {
					t.Fatalf("applied rules lack %q:\n%s", redirect, save())
				}

				a := startAgent(t, Config{IPTablesCheckInterval: 50 * time.Millisecond, IPTablesRepair: repair, IPTables: rc})
				am := a.aux.rules.m
				eventually(t, "a check without drift", func() bool { return am.checks.WithLabelValues(checkOK).Value() >= 1 })
				if got := am.drift.Value(); got != 0 {
					t.Fatalf("drift = %v after apply, want 0", got)
				}

				if _, err := r.Run(ctx, nil, tool, "-w", "10", "-t", "nat", "-D", "MESHDNS_REDIRECT", "1"); err != nil {
					t.Fatal(err)
				}
				if !repair {
					eventually(t, "drift gauge 1", func() bool { return am.drift.Value() == 1 })
					if err := m.Apply(ctx); err != nil {
						t.Fatalf("apply: %v", err)
					}
					eventually(t, "drift gauge 0 after apply", func() bool { return am.drift.Value() == 0 })
				} else {
					eventually(t, "a repair", func() bool { return am.repairs.WithLabelValues(checkOK).Value() >= 1 })
					if got := am.drift.Value(); got != 0 {
						t.Errorf("drift = %v after the repair, want 0", got)
					}
					if got := save(); !strings.Contains(got, redirect) {
						t.Errorf("repair did not restore %q:\n%s", redirect, got)
					}
				}
				a.stop()
				if drift, err := m.Check(ctx); err != nil || drift {
					t.Errorf("Check at the end = %v, %v; want no drift", drift, err)
				}
				if err := m.Clean(ctx); err != nil {
					t.Errorf("clean: %v", err)
				}
			})
		}
	}
}
