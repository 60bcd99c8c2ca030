package agent

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshdns/meshdns/iptables"
)

// fakeRules is an iptables.Runner holding the rules of one namespace: save
// prints the wanted rules of a Manager built from cfg, minus the last rule
// of MESHDNS_REDIRECT while tampered; any restore (a repair) clears the
// tampering.
type fakeRules struct {
	m *iptables.Manager

	mu       sync.Mutex // guards following
	tampered bool
	restores int
	fail     error // returned by every command when set
}

var _ iptables.Runner = (*fakeRules)(nil)

func newFakeRules(t testing.TB, cfg iptables.Config) *fakeRules {
	t.Helper()
	m, err := iptables.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &fakeRules{m: m}
}

func (f *fakeRules) set(tampered bool, fail error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tampered, f.fail = tampered, fail
}

func (f *fakeRules) Run(_ context.Context, stdin []byte, name string, _ ...string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return nil, f.fail
	}
	if stdin != nil {
		f.restores++
		f.tampered = false
		return nil, nil
	}
	fam := iptables.IPv4
	if strings.HasPrefix(name, "ip6tables") {
		fam = iptables.IPv6
	}
	return []byte(f.saveLocked(f.m.Ruleset(fam))), nil
}

// saveLocked renders rs the way iptables-save prints it.
func (f *fakeRules) saveLocked(rs iptables.Ruleset) string {
	var b strings.Builder
	for _, table := range []string{"raw", "nat"} {
		fmt.Fprintf(&b, "*%s\n:PREROUTING ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n", table)
		for _, c := range rs.Chains {
			if c.Table == table {
				fmt.Fprintf(&b, ":%s - [0:0]\n", c.Name)
			}
		}
		for _, j := range rs.Jumps {
			if j.Table == table {
				fmt.Fprintf(&b, "-A %s %s\n", j.Chain, j.Spec())
			}
		}
		for _, c := range rs.Chains {
			if c.Table != table {
				continue
			}
			rules := c.Rules
			if f.tampered && c.Name == "MESHDNS_REDIRECT" {
				rules = rules[:len(rules)-1]
			}
			for _, r := range rules {
				fmt.Fprintf(&b, "-A %s %s\n", c.Name, r.Spec())
			}
		}
		b.WriteString("COMMIT\n")
	}
	return b.String()
}

func testRulesConfig() iptables.Config {
	return iptables.Config{
		ProxyUIDs:   []uint32{1337},
		ProxyGIDs:   []uint32{1337},
		Nameservers: []netip.Addr{netip.MustParseAddr("10.96.0.10")},
		Backend:     iptables.Legacy,
	}
}

// TestIPTablesDrift runs an agent whose rules check reads a fake
// namespace: the drift gauge follows the tampering, the checks counter
// counts every outcome, and with repair the rules are re-applied.
func TestIPTablesDrift(t *testing.T) {
	t.Run("report", func(t *testing.T) {
		rc := testRulesConfig()
		fake := newFakeRules(t, rc)
		rc.Runner = fake
		a := startAgent(t, Config{IPTablesCheckInterval: 10 * time.Millisecond, IPTables: rc})
		m := a.aux.rules.m
		eventually(t, "a check without drift", func() bool { return m.checks.WithLabelValues(checkOK).Value() >= 1 })
		if got := m.drift.Value(); got != 0 {
			t.Errorf("drift = %v before tampering, want 0", got)
		}

		fake.set(true, nil)
		eventually(t, "drift gauge 1", func() bool { return m.drift.Value() == 1 })
		if got := m.checks.WithLabelValues(checkDrift).Value(); got < 1 {
			t.Errorf("checks{drift} = %v, want >= 1", got)
		}

		// A failed check leaves the gauge as it was.
		fake.set(true, fmt.Errorf("iptables-legacy-save: permission denied"))
		eventually(t, "a failed check", func() bool { return m.checks.WithLabelValues(checkError).Value() >= 1 })
		if got := m.drift.Value(); got != 1 {
			t.Errorf("drift = %v after a failed check, want 1 (unchanged)", got)
		}

		fake.set(false, nil)
		eventually(t, "drift gauge 0", func() bool { return m.drift.Value() == 0 })
		a.stop()
		fake.mu.Lock()
		defer fake.mu.Unlock()
		if fake.restores != 0 {
			t.Errorf("%d restores without --iptables-repair, want 0", fake.restores)
		}
	})
	t.Run("repair", func(t *testing.T) {
		rc := testRulesConfig()
		fake := newFakeRules(t, rc)
		rc.Runner = fake
		a := startAgent(t, Config{IPTablesCheckInterval: 10 * time.Millisecond, IPTablesRepair: true, IPTables: rc})
		m := a.aux.rules.m
		eventually(t, "a check without drift", func() bool { return m.checks.WithLabelValues(checkOK).Value() >= 1 })

		fake.set(true, nil)
		eventually(t, "a repair", func() bool { return m.repairs.WithLabelValues(checkOK).Value() >= 1 })
		if got := m.checks.WithLabelValues(checkDrift).Value(); got < 1 {
			t.Errorf("checks{drift} = %v, want >= 1", got)
		}
		if got := m.drift.Value(); got != 0 {
			t.Errorf("drift = %v after a repair, want 0", got)
		}
		a.stop()
		fake.mu.Lock()
		defer fake.mu.Unlock()
		if fake.tampered || fake.restores == 0 {
			t.Errorf("tampered = %v after %d restores, want repaired", fake.tampered, fake.restores)
		}
	})
}

// TestIPTablesCheckOff checks that an agent without an interval registers
// no iptables metrics, and that a bad rule configuration fails New.
func TestIPTablesCheckOff(t *testing.T) {
	a := startAgent(t, Config{})
	if a.aux.rules != nil {
		t.Fatal("rules check running without an interval")
	}
	for _, n := range a.reg.Names() {
		if strings.HasPrefix(n, "meshdns_iptables_") {
			t.Errorf("%s registered without an iptables check", n)
		}
	}
	if _, err := New(Config{IPTablesCheckInterval: time.Minute}); err == nil {
		t.Error("New with a check interval and no rule configuration succeeded")
	}
}
