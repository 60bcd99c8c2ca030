package iptables

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// fakeRunner answers commands from a map of command line to output; a
// missing entry fails like a missing binary. It records restore inputs.
type fakeRunner struct {
	out map[string]string

	mu     sync.Mutex // guards inputs
	inputs []string   // "command\ninput" per call with stdin
}

func (f *fakeRunner) Run(_ context.Context, stdin []byte, name string, args ...string) ([]byte, error) {
	line := strings.Join(append([]string{name}, args...), " ")
	if stdin != nil {
		f.mu.Lock()
		f.inputs = append(f.inputs, line+"\n"+string(stdin))
		f.mu.Unlock()
		return nil, nil
	}
	out, ok := f.out[line]
	if !ok {
		return nil, fmt.Errorf("%s: executable file not found", name)
	}
	return []byte(out), nil
}

func rules(n int) string {
	return "*filter\n:INPUT ACCEPT [0:0]\n" + strings.Repeat("-A INPUT -j ACCEPT\n", n) + "COMMIT\n"
}

func TestDetect(t *testing.T) {
	tests := []struct {
		name    string
		out     map[string]string
		want    Backend
		wantErr error
	}{
		{
			name: "both empty: nft",
			out: map[string]string{"iptables-legacy-save": "", "ip6tables-legacy-save": "",
				"iptables-nft-save": "", "ip6tables-nft-save": ""},
			want: NFT,
		},
		{
			name: "legacy has rules",
			out: map[string]string{"iptables-legacy-save": rules(3), "ip6tables-legacy-save": "",
				"iptables-nft-save": rules(1), "ip6tables-nft-save": ""},
			want: Legacy,
		},
		{
			name: "legacy v6 rules count",
			out: map[string]string{"iptables-legacy-save": "", "ip6tables-legacy-save": rules(2),
				"iptables-nft-save": rules(1), "ip6tables-nft-save": ""},
			want: Legacy,
		},
		{
			name: "nft has more",
			out: map[string]string{"iptables-legacy-save": rules(2), "ip6tables-legacy-save": "",
				"iptables-nft-save": rules(2), "ip6tables-nft-save": rules(2)},
			want: NFT,
		},
		{
			name: "tie: nft",
			out: map[string]string{"iptables-legacy-save": rules(2), "ip6tables-legacy-save": "",
				"iptables-nft-save": rules(2), "ip6tables-nft-save": ""},
			want: NFT,
		},
		{
			name: "only legacy installed",
			out:  map[string]string{"iptables-legacy-save": "", "ip6tables-legacy-save": ""},
			want: Legacy,
		},
		{
			name: "only nft installed, no ip6tables",
			out:  map[string]string{"iptables-nft-save": ""},
			want: NFT,
		},
		{
			name:    "nothing installed",
			out:     map[string]string{},
			wantErr: ErrNoBackend,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Detect(context.Background(), &fakeRunner{out: tc.out})
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("Detect() = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestManagerWithFakeRunner(t *testing.T) {
	cfg := Config{ProxyUIDs: []uint32{1337}, Nameservers: addrs("10.96.0.10")}
	applied := ApplyInput(Build(cfg, IPv4), nil)
	// What iptables-save shows after the apply: our -I lines as -A.
	saved := strings.ReplaceAll(strings.ReplaceAll(strings.ReplaceAll(applied,
		"-I OUTPUT 1 ", "-A OUTPUT "), "-I PREROUTING 1 ", "-A PREROUTING "), ":MESHDNS_PREROUTING", ":PREROUTING ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:MESHDNS_PREROUTING")
	f := &fakeRunner{out: map[string]string{
		"iptables-legacy-save": saved, "ip6tables-legacy-save": "",
		"iptables-nft-save": "", "ip6tables-nft-save": "",
	}}
	cfg.Runner = f
	cfg.DisableIPv6 = true
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if b, err := m.Backend(ctx); err != nil || b != Legacy {
		t.Fatalf("Backend() = %q, %v; want legacy (it holds the rules)", b, err)
	}
	if d, err := m.Diff(ctx); err != nil || len(d) != 0 {
		t.Errorf("Diff() = %q, %v; want none", d, err)
	}
	if err := m.Apply(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.Clean(ctx); err != nil {
		t.Fatal(err)
	}
	if len(f.inputs) != 2 {
		t.Fatalf("ran %d restores, want apply and clean: %q", len(f.inputs), f.inputs)
	}
	if !strings.HasPrefix(f.inputs[0], "iptables-legacy-restore --noflush --wait=10\n") ||
		strings.Count(f.inputs[0], "-D OUTPUT") != 2 || strings.Count(f.inputs[0], "-I OUTPUT 1") != 2 {
		t.Errorf("apply input does not replace the jumps:\n%s", f.inputs[0])
	}
	if !strings.Contains(f.inputs[1], "-X MESHDNS_REDIRECT") {
		t.Errorf("clean input does not delete our chains:\n%s", f.inputs[1])
	}
}

func TestDiff(t *testing.T) {
	cfg := Config{ProxyUIDs: []uint32{1337}, Nameservers: addrs("10.96.0.10")}
	rs := Build(cfg, IPv4)
	good := func() Dump {
		d := Dump{}
		for _, tb := range []string{"raw", "nat"} {
			d[tb] = &TableDump{Rules: map[string][]string{}}
		}
		for _, j := range rs.Jumps {
			td := d[j.Table]
			if _, ok := td.Rules[j.Chain]; !ok {
				td.Chains = append(td.Chains, j.Chain)
			}
			td.Rules[j.Chain] = append(td.Rules[j.Chain], j.Spec())
		}
		for _, c := range rs.Chains {
			td := d[c.Table]
			td.Chains = append(td.Chains, c.Name)
			td.Rules[c.Name] = nil
			for _, r := range c.Rules {
				td.Rules[c.Name] = append(td.Rules[c.Name], r.Spec())
			}
		}
		return d
	}
	tests := []struct {
		name   string
		change func(Dump)
		want   []string
	}{
		{name: "in sync", change: func(Dump) {}},
		{name: "chain missing", change: func(d Dump) {
			delete(d["nat"].Rules, chainRedirect)
			d["nat"].Chains = []string{"OUTPUT", chainOutput}
		}, want: []string{"ipv4 nat: chain MESHDNS_REDIRECT missing"}},
		{name: "rule missing", change: func(d Dump) { d["raw"].Rules[chainPrerouting] = nil },
			want: []string{"ipv4 raw: chain MESHDNS_PREROUTING has 0 rules, want 1 (or they differ)"}},
		{name: "jump doubled", change: func(d Dump) {
			d["nat"].Rules["OUTPUT"] = append(d["nat"].Rules["OUTPUT"], d["nat"].Rules["OUTPUT"][0])
		}, want: []string{"ipv4 nat: jump OUTPUT -> MESHDNS_OUTPUT present 2 times, want 1"}},
		{name: "stale chain", change: func(d Dump) {
			d["nat"].Chains = append(d["nat"].Chains, "MESHDNS_OLD")
		}, want: []string{"ipv4 nat: unexpected chain MESHDNS_OLD"}},
		{name: "foreign rules are not drift", change: func(d Dump) {
			d["nat"].Rules["OUTPUT"] = append(d["nat"].Rules["OUTPUT"], "-p tcp -j ISTIO_OUTPUT")
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := good()
			tc.change(d)
			if diff := cmp.Diff(tc.want, diffRules(rs, d)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestIPv6Unavailable: a node without ip6tables support still gets its
// IPv4 rules unless an IPv6 nameserver needs capturing.
func TestIPv6Unavailable(t *testing.T) {
	tests := []struct {
		name        string
		nameservers []string
		wantSteps   int
		wantErr     bool
	}{
		{name: "IPv4 nameservers only: IPv6 skipped", nameservers: []string{"10.96.0.10"}, wantSteps: 1},
		{name: "IPv6 nameserver: error", nameservers: []string{"10.96.0.10", "fd00::a"}, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeRunner{out: map[string]string{"iptables-nft-save": ""}}
			m, err := New(Config{ProxyUIDs: []uint32{1337}, Nameservers: addrs(tc.nameservers...), Backend: NFT, Runner: f})
			if err != nil {
				t.Fatal(err)
			}
			steps, err := m.PlanApply(context.Background())
			if (err != nil) != tc.wantErr {
				t.Fatalf("PlanApply() error = %v, wantErr %v", err, tc.wantErr)
			}
			if len(steps) != tc.wantSteps {
				t.Errorf("PlanApply() = %d steps, want %d", len(steps), tc.wantSteps)
			}
			if _, err := m.Diff(context.Background()); (err != nil) != tc.wantErr {
				t.Errorf("Diff() error = %v, wantErr %v", err, tc.wantErr)
			}
			if _, err := m.PlanClean(context.Background()); err != nil {
				t.Errorf("PlanClean() = %v, want IPv6 skipped", err)
			}
		})
	}
}
