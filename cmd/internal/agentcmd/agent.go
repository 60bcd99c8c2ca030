// Package agentcmd is the agent command, `meshdns agent`: its flags
// (each also read from MESHDNS_<FLAG>), the checks before the agent
// starts, and the supervisor that keeps the DNS sockets across a crash.
// Both binaries register it: cmd/meshdns-agent (the sidecar's: this and
// version only) and cmd/meshdns (VMs run `meshdns agent`).
package agentcmd

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/meshdns/meshdns/agent"
	"github.com/meshdns/meshdns/cmd/internal/captureflags"
	"github.com/meshdns/meshdns/cmd/internal/cli"
	"github.com/meshdns/meshdns/internal/certfile"
	"github.com/meshdns/meshdns/internal/metrics"
	"github.com/meshdns/meshdns/iptables"
	"github.com/meshdns/meshdns/pkg/proxy"
	"github.com/meshdns/meshdns/pkg/proxy/upstream"
)

// Command is `meshdns agent`.
var Command = cli.Command{
	Summary: "run the per-pod DNS agent (see agent/README.md)",
	Run:     run,
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	args, supervised := cutSupervise(args)
	cfg, err := agentConfig(args, stdout, stderr)
	if err != nil {
		return err
	}
	if supervised {
		return supervise(ctx, args, cfg, stderr)
	}
	if cfg.Sockets, err = inheritedSockets(); err != nil {
		return err
	}
	if err := agentPreflight(cfg); err != nil {
		return err
	}
	a, err := agent.New(cfg)
	if err != nil {
		return err
	}
	return a.Run(ctx)
}

// agentConfig turns the command line and environment into agent.Config,
// with a logger on stderr and a registry holding the Go and process metrics
// and meshdns_build_info. --help goes to stdout.
func agentConfig(args []string, stdout, stderr io.Writer) (agent.Config, error) {
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	fs.SetOutput(stdout)
	var (
		dnsAddrs, upstreams, controlPlanes cli.StringList
		cfg                                agent.Config
		ttl                                time.Duration
		rules                              captureflags.Rules
	)
	fs.Var(&dnsAddrs, "dns-addr", "address served over UDP and TCP, repeatable (default 127.0.0.1:15053)")
	fs.StringVar(&cfg.AdminAddr, "admin-addr", "127.0.0.1:15020", `admin HTTP address, loopback only: /debug/*, /metrics, probes ("-" turns it off)`)
	fs.StringVar(&cfg.ProbeAddr, "probe-addr", "", "address serving only /healthz/ready, /healthz/live and /metrics, e.g. 0.0.0.0:15121 in a pod for the kubelet and Prometheus (empty: off)")
	fs.StringVar(&cfg.ResolvConf, "resolv-conf", "/etc/resolv.conf", "resolv.conf with the upstream nameservers, search list and ndots")
	fs.StringVar(&cfg.VMResolvConf, "vm-resolv-conf", "/var/lib/meshdns/resolv.conf", "upstreams on a VM: used instead of --resolv-conf's nameservers when serving port 53 and the file exists")
	fs.Var(&upstreams, "upstream", "upstream nameserver IP[:port] (port 53 when absent; [v6]:port) or tls://IP[:port][@server.name] (DNS over TLS, port 853), repeatable; overrides the resolv.conf nameservers (the search list stays)")
	fs.StringVar(&cfg.UpstreamCA, "upstream-tls-ca", "", "CA certificates (PEM) that verify DNS-over-TLS upstreams (empty: the system's roots)")
	fs.StringVar(&cfg.Namespace, "namespace", "", "namespace of the pod (env POD_NAMESPACE)")
	fs.StringVar(&cfg.PodName, "pod-name", "", "name of the pod (env POD_NAME)")
	fs.StringVar(&cfg.ClusterDomain, "cluster-domain", "cluster.local", "cluster DNS domain")
	cli.DurationVar(fs, &ttl, "ttl", 30*time.Second, "TTL of table answers whose name has none")
	fs.Var(podRecordsFlag{&cfg.ForwardPods}, "pod-records", `pod names a-b-c-d.<ns>.pod.<domain>: "insecure" synthesizes them from the name (kubeadm's default), "forward" asks the cluster DNS ("pods verified")`)
	zoneAware := fs.Bool("zone-aware", true, "answer a headless service with the endpoints in the pod's zone first (the zone the control plane sends; false: the table's order)")
	fs.StringVar(&cfg.NameTableFile, "nametable-file", "", "static name table (protojson meshdns.v1.NameTable), reloaded on change")
	fs.Var(&controlPlanes, "control-plane", "control plane host:port[,host:port...], tried in order")
	fs.StringVar(&cfg.CACert, "ca-cert", "", "CA certificate (PEM) that verifies the control plane; turns TLS on")
	fs.StringVar(&cfg.TLSCert, "tls-cert", "", "client certificate (PEM) for mTLS to the control plane")
	fs.StringVar(&cfg.TLSKey, "tls-key", "", "client key (PEM) for mTLS to the control plane")
	fs.StringVar(&cfg.TokenFile, "token-file", "", "bearer token presented to the control plane (the pod's projected ServiceAccount token, audience meshdns), re-read at every reconnect; needs --ca-cert")
	fs.StringVar(&cfg.StateDir, "state-dir", "", "directory keeping the last control plane table across restarts")
	fs.DurationVar(&cfg.Probation, "probation", 30*time.Second, "with --state-dir, a control plane version restarts restore only after serving this long; a death sooner restores the previous one and rejects it (0: off)")
	fs.DurationVar(&cfg.ReadyGrace, "ready-grace", 10*time.Second, "with a restored table and no control plane, report ready after this long")
	logs := cli.NewLogFlags(fs, "debug, info, warn or error (more detail at runtime: PUT /debug/loglevel?level=; never quieter than this)")
	fs.DurationVar(&cfg.UpstreamTimeout, "upstream-timeout", 2*time.Second, "time a try to an upstream waits alone before the next goes out (earlier tries keep listening until the resolv.conf timeout)")
	fs.BoolVar(&cfg.Takeover, "takeover", false, "join the DNS sockets of a running agent (graceful upgrade: stop the old one once this one is ready)")
	fs.BoolVar(&cfg.ParallelUpstreams, "parallel-upstreams", false, "race every upstream instead of trying them in turn")
	fs.IntVar(&cfg.CacheSize, "cache-size", 10000, "forwarded replies cached (negative: no cache)")
	fs.IntVar(&cfg.Prefetch, "prefetch", 0, "refresh a cached reply asked for this many times in a row before it expires, as CoreDNS cache's prefetch (0: off)")
	fs.DurationVar(&cfg.PrefetchWindow, "prefetch-window", time.Minute, "most time between two questions that count as in a row for --prefetch")
	fs.IntVar(&cfg.PrefetchPercent, "prefetch-percent", 10, "refresh a hot reply (--prefetch) once this percentage of its TTL is left")
	fs.TextVar(&cfg.QueryLog.Classes, "query-log", proxy.QueryLogClass(0), "answers logged as JSON lines on stderr: off, or any of denied,nxdomain,servfail,upstream_error,all (raised at runtime by PUT /debug/querylog, never lowered)")
	fs.IntVar(&cfg.QueryLog.Sample, "query-log-sample", 0, "log one in N of the answers --query-log matches, at random (0 or 1: each)")
	fs.IntVar(&cfg.QueryLog.Rate, "query-log-rate", 100, "at most N query log lines a second (0: no cap)")
	queryLogStderr := fs.Bool("query-log-stderr", true, "write the query log's JSON lines on stderr (false: --dnstap frames only)")
	fs.StringVar(&cfg.PodAnnotations, "pod-annotations", "", "the pod's annotations file (downward API): its meshdns.io/query-log, -sample and -rate annotations set the query log while the agent runs")
	fs.StringVar(&cfg.Dnstap, "dnstap", "", "send the answers the query log writes as dnstap frames to unix:///path or tcp://host:port")
	fs.DurationVar(&cfg.IPTablesCheckInterval, "iptables-check-interval", 0, "re-check the DNS capture rules this often and report drift in metrics (0: never; reading them needs NET_ADMIN)")
	fs.BoolVar(&cfg.IPTablesRepair, "iptables-repair", false, "re-apply the capture rules when drift is found (needs NET_ADMIN)")
	fs.StringVar(&rules.Backend, "iptables-backend", "auto", "backend of the capture rules: auto, legacy or nft")
	fs.Var(&rules.UIDs, "iptables-proxy-uid", "uid the capture rules exempt, repeatable (default: the agent's own uid and gid, when neither this nor --iptables-proxy-gid is given)")
	fs.Var(&rules.GIDs, "iptables-proxy-gid", "gid the capture rules exempt, repeatable")
	fs.BoolVar(&rules.CaptureAll, "iptables-capture-all-dns", false, "the capture rules redirect all port 53 traffic (as iptables apply --capture-all-dns)")
	fs.BoolVar(&rules.NoIPv6, "iptables-disable-ipv6", false, "the capture rules are IPv4 only (as iptables apply --disable-ipv6)")
	if err := cli.ParseFlags(fs, args, map[string][]string{
		"namespace": {"POD_NAMESPACE"},
		"pod-name":  {"POD_NAME"},
	}); err != nil {
		return cfg, err
	}
	cfg.QueryLogNoLines = !*queryLogStderr
	if cfg.Probation == 0 {
		// The command line refuses negative durations, and the Config's
		// zero is its 30s default: 0 given here is the Config's "none".
		cfg.Probation = -1
	}
	cfg.IgnorePodZone = !*zoneAware
	if cfg.QueryLog.Sample < 0 || cfg.QueryLog.Rate < 0 {
		return cfg, cli.Usagef("--query-log-sample and --query-log-rate take numbers >= 0")
	}
	if cfg.Prefetch < 0 || cfg.PrefetchPercent < 1 || cfg.PrefetchPercent > 100 {
		return cfg, cli.Usagef("--prefetch takes a number >= 0 and --prefetch-percent 1 to 100")
	}
	if ttl < time.Second || ttl > (1<<31-1)*time.Second || ttl%time.Second != 0 {
		return cfg, cli.Usagef("--ttl %s: want whole seconds from 1s to 2147483647s (DNS TTLs count seconds)", ttl)
	}
	log, level, err := logs.Logger(stderr)
	if err != nil {
		return cfg, err
	}
	// The query log's lines go where the command's logs go, not to the
	// process's stderr behind the caller's back.
	cfg.QueryLogOutput = stderr
	for i, u := range upstreams {
		if upstreams[i], err = upstreamAddr(u); err != nil {
			return cfg, err
		}
	}
	if (cfg.TLSCert == "") != (cfg.TLSKey == "") {
		return cfg, cli.Usagef("--tls-cert and --tls-key go together")
	}
	if cfg.NameTableFile != "" && len(controlPlanes) > 0 {
		return cfg, cli.Usagef("--nametable-file and --control-plane exclude each other: the table comes from a file or from the control plane")
	}
	for _, a := range dnsAddrs {
		if err := cli.HostPort("--dns-addr", a); err != nil {
			return cfg, err
		}
	}
	if cfg.AdminAddr != "-" {
		if err := cli.HostPort("--admin-addr", cfg.AdminAddr); err != nil {
			return cfg, err
		}
	}
	if cfg.IPTablesCheckInterval > 0 {
		rc, err := agentRules(rules, dnsAddrs, cfg.ResolvConf)
		if err != nil {
			return cfg, err
		}
		cfg.IPTables = rc
	}
	reg := metrics.NewRegistry()
	reg.MustRegister(metrics.GoCollector{}, metrics.ProcessCollector{}, buildInfoGauge())
	cfg.DNSAddrs = dnsAddrs
	cfg.Upstreams = upstreams
	cfg.ControlPlanes = controlPlanes
	cfg.TTL = uint32(ttl / time.Second)
	cfg.Version = cli.BuildInfo().Version
	cfg.LogLevel = level
	cfg.Logger = log
	cfg.Registry = reg
	return cfg, nil
}

// agentRules describes the capture rules the agent checks: those `meshdns
// iptables apply` wrote with the same resolv.conf, the agent's DNS port and
// the agent's own uid and gid (which the injected init container is given).
func agentRules(rf captureflags.Rules, dnsAddrs []string, resolvConf string) (iptables.Config, error) {
	rf.Prefix = "iptables-"
	rf.ResolvConf = resolvConf
	rf.Port = iptables.DefaultProxyPort
	if len(dnsAddrs) > 0 {
		// The rules redirect to one port: the first address's.
		_, p, err := net.SplitHostPort(dnsAddrs[0])
		if err != nil {
			return iptables.Config{}, cli.Usagef("--dns-addr %q: want host:port", dnsAddrs[0])
		}
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil || n == 0 {
			return iptables.Config{}, cli.Usagef("--dns-addr %q: the iptables check needs a fixed port", dnsAddrs[0])
		}
		rf.Port = uint16(n)
	}
	if len(rf.UIDs) == 0 && len(rf.GIDs) == 0 {
		rf.UIDs = cli.StringList{strconv.Itoa(os.Getuid())}
		rf.GIDs = cli.StringList{strconv.Itoa(os.Getgid())}
	}
	return rf.Config()
}

// podRecordsFlag is --pod-records: insecure or forward.
type podRecordsFlag struct{ forward *bool }

func (f podRecordsFlag) String() string {
	if f.forward != nil && *f.forward {
		return "forward"
	}
	return "insecure"
}

func (f podRecordsFlag) Set(s string) error {
	switch s {
	case "insecure":
		*f.forward = false
	case "forward":
		*f.forward = true
	default:
		return fmt.Errorf("want insecure or forward, not %q", s)
	}
	return nil
}

// upstreamAddr turns an --upstream value into its canonical form: an IP
// address alone means port 53, as a nameserver line of resolv.conf does;
// tls://IP[:port][@server.name] is DNS over TLS (CoreDNS forward's syntax).
func upstreamAddr(s string) (string, error) {
	a, err := upstream.ParseAddr(s)
	if err != nil {
		return "", cli.Usagef("--upstream %q: want an IP address, optionally with a port (10.0.0.10, 10.0.0.10:5353, fd00::10, [fd00::10]:5353), or tls://IP[:port][@server.name] for DNS over TLS", s)
	}
	return a.String(), nil
}

// agentPreflight refuses, before the agent logs that it starts, sources it
// could never read: a table file or resolv.conf that does not exist or is
// not readable, TLS files that do not load. (A table file with bad content
// is not refused: the agent keeps serving and takes the next good version.)
func agentPreflight(cfg agent.Config) error {
	if cfg.NameTableFile != "" {
		if err := cli.Readable("--nametable-file", cfg.NameTableFile); err != nil {
			return err
		}
	}
	if cfg.UpstreamCA != "" {
		if err := cli.Readable("--upstream-tls-ca", cfg.UpstreamCA); err != nil {
			return err
		}
	}
	if cfg.ResolvConf != "" { // its search list is read even with --upstream
		if err := cli.Readable("--resolv-conf", cfg.ResolvConf); err != nil {
			return err
		}
	}
	if cfg.CACert != "" || cfg.TLSCert != "" {
		r, err := certfile.New(certfile.Config{CAFile: cfg.CACert, CertFile: cfg.TLSCert, KeyFile: cfg.TLSKey})
		if err != nil {
			return err
		}
		if _, err := r.ClientConfig(); err != nil {
			return fmt.Errorf("--ca-cert/--tls-cert/--tls-key: %w", err)
		}
	}
	return nil
}

// buildInfoGauge is meshdns_build_info for the agent's registry.
func buildInfoGauge() *metrics.GaugeFunc {
	b := cli.BuildInfo()
	return metrics.NewConstLabelGaugeFunc(metrics.Opts{Name: cli.BuildInfoName, Help: cli.BuildInfoHelp},
		[]string{"version", "revision", "goversion"}, []string{b.Version, b.Revision, b.GoVersion},
		func() float64 { return 1 })
}
