package agentcmd

import (
	"context"
	"io"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/agent"
	"github.com/meshdns/meshdns/cmd/internal/captureflags"
	"github.com/meshdns/meshdns/cmd/internal/cli"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
	"github.com/meshdns/meshdns/iptables"
	"github.com/meshdns/meshdns/pkg/proxy"
)

// defaultQueryLog is the query log of an agent without --query-log*:
// off, with a cap ready for when it is turned on.
var defaultQueryLog = proxy.QueryLogConfig{Rate: 100}

func TestAgentFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		want    agent.Config
		wantErr string
	}{
		{
			name: "defaults",
			want: agent.Config{AdminAddr: "127.0.0.1:15020", ResolvConf: "/etc/resolv.conf",
				VMResolvConf: "/var/lib/meshdns/resolv.conf", ClusterDomain: "cluster.local", TTL: 30,
				ReadyGrace: 10 * time.Second, Probation: 30 * time.Second, UpstreamTimeout: 2 * time.Second, CacheSize: 10000, PrefetchWindow: time.Minute, PrefetchPercent: 10, QueryLog: defaultQueryLog},
		},
		{
			name: "every flag",
			args: []string{"--dns-addr", "127.0.0.1:53", "--dns-addr", "[::1]:53", "--admin-addr", "-",
				"--resolv-conf", "r.conf", "--vm-resolv-conf", "vm.conf", "--upstream", "10.0.0.1:53,10.0.0.2:53,tls://10.0.0.3@dns.corp",
				"--namespace", "demo", "--pod-name", "web-0", "--cluster-domain", "corp.local", "--ttl", "5",
				"--control-plane", "cp-0:15012,cp-1:15012", "--ca-cert", "ca.pem", "--tls-cert", "c.pem",
				"--tls-key", "c.key", "--state-dir", "/var/run/meshdns", "--ready-grace", "3s", "--probation", "1m",
				"--upstream-timeout", "500ms", "--parallel-upstreams", "--cache-size", "-1", "--pod-records", "forward",
				"--query-log", "nxdomain,servfail", "--query-log-sample", "10", "--query-log-rate", "0",
				"--prefetch", "3", "--prefetch-window", "30s", "--prefetch-percent", "20", "--upstream-tls-ca", "corp.pem", "--zone-aware=false"},
			want: agent.Config{DNSAddrs: []string{"127.0.0.1:53", "[::1]:53"}, AdminAddr: "-", ResolvConf: "r.conf",
				VMResolvConf: "vm.conf", Upstreams: []string{"10.0.0.1:53", "10.0.0.2:53", "tls://10.0.0.3:853@dns.corp"}, UpstreamCA: "corp.pem", Namespace: "demo",
				PodName: "web-0", ClusterDomain: "corp.local", TTL: 5, ControlPlanes: []string{"cp-0:15012", "cp-1:15012"},
				CACert: "ca.pem", TLSCert: "c.pem", TLSKey: "c.key", StateDir: "/var/run/meshdns",
				ReadyGrace: 3 * time.Second, Probation: time.Minute, UpstreamTimeout: 500 * time.Millisecond, ParallelUpstreams: true, CacheSize: -1,
				Prefetch: 3, PrefetchWindow: 30 * time.Second, PrefetchPercent: 20,
				ForwardPods: true, IgnorePodZone: true, QueryLog: proxy.QueryLogConfig{Classes: proxy.LogNXDomain | proxy.LogServFail, Sample: 10}},
		},
		{
			name: "environment",
			env: map[string]string{"POD_NAMESPACE": "from-downward-api", "POD_NAME": "web-1",
				"MESHDNS_UPSTREAM": "10.0.0.9:53", "MESHDNS_CONTROL_PLANE": "a:1,b:2", "MESHDNS_TTL": "7"},
			want: agent.Config{AdminAddr: "127.0.0.1:15020", ResolvConf: "/etc/resolv.conf",
				VMResolvConf: "/var/lib/meshdns/resolv.conf", ClusterDomain: "cluster.local", TTL: 7,
				Namespace: "from-downward-api", PodName: "web-1", Upstreams: []string{"10.0.0.9:53"},
				ControlPlanes: []string{"a:1", "b:2"}, ReadyGrace: 10 * time.Second, Probation: 30 * time.Second, UpstreamTimeout: 2 * time.Second, CacheSize: 10000, PrefetchWindow: time.Minute, PrefetchPercent: 10, QueryLog: defaultQueryLog},
		},
		{
			name: "MESHDNS_NAMESPACE wins over POD_NAMESPACE",
			env:  map[string]string{"POD_NAMESPACE": "b", "MESHDNS_NAMESPACE": "a"},
			want: agent.Config{AdminAddr: "127.0.0.1:15020", ResolvConf: "/etc/resolv.conf",
				VMResolvConf: "/var/lib/meshdns/resolv.conf", ClusterDomain: "cluster.local", TTL: 30, Namespace: "a",
				ReadyGrace: 10 * time.Second, Probation: 30 * time.Second, UpstreamTimeout: 2 * time.Second, CacheSize: 10000, PrefetchWindow: time.Minute, PrefetchPercent: 10, QueryLog: defaultQueryLog},
		},
		{name: "probation off", args: []string{"--probation", "0"}, want: agent.Config{AdminAddr: "127.0.0.1:15020", ResolvConf: "/etc/resolv.conf",
			VMResolvConf: "/var/lib/meshdns/resolv.conf", ClusterDomain: "cluster.local", TTL: 30,
			ReadyGrace: 10 * time.Second, Probation: -1, UpstreamTimeout: 2 * time.Second, CacheSize: 10000, PrefetchWindow: time.Minute, PrefetchPercent: 10, QueryLog: defaultQueryLog}},
		{name: "negative probation", args: []string{"--probation", "-1s"}, wantErr: "--probation -1s: a duration must not be negative"},
		{name: "zero ttl", args: []string{"--ttl", "0"}, wantErr: "--ttl 0"},
		{name: "ttl as a duration", args: []string{"--ttl", "2m"}, want: agent.Config{AdminAddr: "127.0.0.1:15020", ResolvConf: "/etc/resolv.conf",
			VMResolvConf: "/var/lib/meshdns/resolv.conf", ClusterDomain: "cluster.local", TTL: 120,
			ReadyGrace: 10 * time.Second, Probation: 30 * time.Second, UpstreamTimeout: 2 * time.Second, CacheSize: 10000, PrefetchWindow: time.Minute, PrefetchPercent: 10, QueryLog: defaultQueryLog}},
		{name: "ttl not in whole seconds", args: []string{"--ttl", "1500ms"}, wantErr: "--ttl 1.5s: want whole seconds"},
		{name: "bad pod records", args: []string{"--pod-records", "verified"}, wantErr: "want insecure or forward"},
		{name: "bad log level", args: []string{"--log-level", "loud"}, wantErr: "--log-level"},
		{name: "stray argument", args: []string{"extra"}, wantErr: "unexpected arguments"},
		{
			name: "upstream without a port means 53",
			args: []string{"--upstream", "1.2.3.4", "--upstream", "fd00::10", "--upstream", "[fd00::11]", "--upstream", "10.0.0.1:5353", "--log-format", "json"},
			want: agent.Config{AdminAddr: "127.0.0.1:15020", ResolvConf: "/etc/resolv.conf",
				VMResolvConf: "/var/lib/meshdns/resolv.conf", ClusterDomain: "cluster.local", TTL: 30,
				Upstreams:  []string{"1.2.3.4:53", "[fd00::10]:53", "[fd00::11]:53", "10.0.0.1:5353"},
				ReadyGrace: 10 * time.Second, Probation: 30 * time.Second, UpstreamTimeout: 2 * time.Second, CacheSize: 10000, PrefetchWindow: time.Minute, PrefetchPercent: 10, QueryLog: defaultQueryLog},
		},
		{name: "upstream hostname", args: []string{"--upstream", "dns.example:53"}, wantErr: `--upstream "dns.example:53": want an IP address`},
		{name: "prefetch percent over 100", args: []string{"--prefetch-percent", "101"}, wantErr: "--prefetch-percent 1 to 100"},
		{name: "upstream port zero", args: []string{"--upstream", "1.2.3.4:0"}, wantErr: "want an IP address, optionally with a port"},
		{name: "negative duration", args: []string{"--upstream-timeout", "-1s"}, wantErr: "--upstream-timeout -1s: a duration must not be negative"},
		{name: "negative duration from the environment", env: map[string]string{"MESHDNS_READY_GRACE": "-5s"}, wantErr: "--ready-grace -5s"},
		{name: "bad log format", args: []string{"--log-format", "xml"}, wantErr: `--log-format "xml": want text or json`},
		{name: "unknown flag", args: []string{"--upstreams", "1.2.3.4"}, wantErr: "unknown flag --upstreams"},
		{name: "bad query log class", args: []string{"--query-log", "nxdomain,loud"}, wantErr: `unknown query log class "loud"`},
		{name: "negative query log rate", args: []string{"--query-log-rate", "-1"}, wantErr: "--query-log-rate"},
		{name: "certificate without key", args: []string{"--tls-cert", "c.pem"}, wantErr: "--tls-cert and --tls-key go together"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := configFrom(t, tt.args, tt.env, tt.wantErr,
				"POD_NAMESPACE", "POD_NAME", "MESHDNS_NAMESPACE", "MESHDNS_UPSTREAM", "MESHDNS_CONTROL_PLANE", "MESHDNS_TTL", "MESHDNS_READY_GRACE")
			if !ok {
				return
			}
			if got.Logger == nil || got.Registry == nil || got.LogLevel == nil {
				t.Error("logger, level or registry not set")
			}
			if diff := cmp.Diff(tt.want, got, cmpopts.IgnoreFields(agent.Config{}, "Logger", "LogLevel", "QueryLogOutput", "Registry", "Version")); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
}

// TestAgentIPTablesFlags checks that the agent's rule check describes the
// rules the way `meshdns iptables apply` does with the same inputs.
func TestAgentIPTablesFlags(t *testing.T) {
	rc := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(rc, []byte("nameserver 10.96.0.10\nsearch demo.svc.cluster.local\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	type checkConfig struct {
		Interval time.Duration
		Repair   bool
		Rules    iptables.Config
	}
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		want    checkConfig
		wantErr string
	}{
		{name: "off by default", args: []string{"--resolv-conf", rc}},
		{
			name: "defaults: own ids, agent port, resolv.conf nameservers",
			args: []string{"--resolv-conf", rc, "--iptables-check-interval", "1m"},
			want: checkConfig{Interval: time.Minute, Rules: iptables.Config{ProxyPort: 15053,
				ProxyUIDs: []uint32{uint32(os.Getuid())}, ProxyGIDs: []uint32{uint32(os.Getgid())},
				Nameservers: []netip.Addr{netip.MustParseAddr("10.96.0.10")}, Backend: iptables.Auto}},
		},
		{
			name: "every flag",
			args: []string{"--resolv-conf", rc + ".unused", "--dns-addr", "127.0.0.1:53", "--iptables-check-interval", "30s",
				"--iptables-repair", "--iptables-backend", "nft", "--iptables-proxy-uid", "1337",
				"--iptables-capture-all-dns", "--iptables-disable-ipv6"},
			want: checkConfig{Interval: 30 * time.Second, Repair: true, Rules: iptables.Config{ProxyPort: 53,
				ProxyUIDs: []uint32{1337}, CaptureAllDNS: true, Backend: iptables.NFT, DisableIPv6: true}},
		},
		{
			name: "environment",
			args: []string{"--resolv-conf", rc},
			env:  map[string]string{"MESHDNS_IPTABLES_CHECK_INTERVAL": "10s", "MESHDNS_IPTABLES_PROXY_GID": "1337,1338"},
			want: checkConfig{Interval: 10 * time.Second, Rules: iptables.Config{ProxyPort: 15053,
				ProxyGIDs: []uint32{1337, 1338}, Nameservers: []netip.Addr{netip.MustParseAddr("10.96.0.10")},
				Backend: iptables.Auto}},
		},
		{name: "negative interval", args: []string{"--iptables-check-interval", "-1s"}, wantErr: "must not be negative"},
		{name: "bad backend", args: []string{"--resolv-conf", rc, "--iptables-check-interval", "1m", "--iptables-backend", "ebpf"}, wantErr: "unknown iptables backend"},
		{name: "bad uid", args: []string{"--resolv-conf", rc, "--iptables-check-interval", "1m", "--iptables-proxy-uid", "agent"}, wantErr: "--iptables-proxy-uid"},
		{name: "missing resolv.conf", args: []string{"--resolv-conf", rc + ".missing", "--iptables-check-interval", "1m"}, wantErr: "no such file"},
		{name: "port 0", args: []string{"--resolv-conf", rc, "--iptables-check-interval", "1m", "--dns-addr", "127.0.0.1:0"}, wantErr: "fixed port"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, ok := configFrom(t, tt.args, tt.env, tt.wantErr, "MESHDNS_IPTABLES_CHECK_INTERVAL", "MESHDNS_IPTABLES_PROXY_GID")
			if !ok {
				return
			}
			got := checkConfig{Interval: cfg.IPTablesCheckInterval, Repair: cfg.IPTablesRepair, Rules: cfg.IPTables}
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateComparable(netip.Addr{})); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
}

// TestAgentCommandServesExample runs what `make run` runs, on free ports.
func TestAgentCommandServesExample(t *testing.T) {
	dnsAddr, adminAddr := testenv.FreeAddr(t), testenv.FreeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--nametable-file", "../../../examples/nametable.json", "--namespace", "demo",
			"--resolv-conf", "../../../examples/resolv.conf", "--upstream", "127.0.0.53", "--dns-addr", dnsAddr,
			"--admin-addr", adminAddr, "--log-level", "error"}, io.Discard, io.Discard)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent: %v", err)
		}
	})
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := http.Get("http://" + adminAddr + "/healthz/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent not ready: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	m := new(dns.Msg)
	m.SetQuestion("web.demo.svc.cluster.local.", dns.TypeA)
	r, _, err := (&dns.Client{Timeout: 2 * time.Second}).Exchange(m, dnsAddr)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != "10.96.0.20" || !r.Authoritative {
		t.Errorf("answer = %v (aa=%v), want web.demo.svc.cluster.local A 10.96.0.20 authoritative", r.Answer, r.Authoritative)
	}
}

// TestAgentFlagsDocumented checks that every agent flag is in the
// Configuration table of agent/README.md.
func TestAgentFlagsDocumented(t *testing.T) {
	var usage strings.Builder
	if _, err := agentConfig([]string{"-h"}, &usage, io.Discard); err == nil {
		t.Fatal("-h did not stop parsing")
	}
	readme, err := os.ReadFile("../../../agent/README.md")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(usage.String(), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], "-") || strings.HasPrefix(line, "\t") {
			continue
		}
		n++
		name := "--" + strings.TrimLeft(f[0], "-")
		if !strings.Contains(string(readme), "`"+name+"`") {
			t.Errorf("flag %s is not documented in agent/README.md", name)
		}
	}
	if n < 20 {
		t.Errorf("found %d flags in the usage text, want the whole contract (>= 20)\n%s", n, usage.String())
	}
}

// TestAgentRejectsNativeDriftCheck: the drift check reads rules with the
// iptables tools, so the agent refuses to check native rules.
func TestAgentRejectsNativeDriftCheck(t *testing.T) {
	rf := captureflags.Rules{Backend: captureflags.BackendNative, UIDs: cli.StringList{"1337"}}
	if _, err := agentRules(rf, nil, ""); err == nil || !strings.Contains(err.Error(), "--iptables-backend native") {
		t.Errorf("agentRules(native) = %v, want an error naming --iptables-backend native", err)
	}
}

// configFrom runs agentConfig on args with the variables unset cleared
// and env set (both restored after the test). With wantErr it checks that
// the error contains it and returns false; otherwise it fails on an error.
func configFrom(t *testing.T, args []string, env map[string]string, wantErr string, unset ...string) (agent.Config, bool) {
	t.Helper()
	for _, k := range unset {
		t.Setenv(k, "") // restores the variable after the test
		os.Unsetenv(k)
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
	cfg, err := agentConfig(args, io.Discard, io.Discard)
	if wantErr != "" {
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Fatalf("err = %v, want %q", err, wantErr)
		}
		return agent.Config{}, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return cfg, true
}
