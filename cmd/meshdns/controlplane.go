package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/netip"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/meshdns/meshdns/cmd/internal/cli"
	"github.com/meshdns/meshdns/controlplane"
	"github.com/meshdns/meshdns/controlplane/kubesource"
	"github.com/meshdns/meshdns/controlplane/webhook"
	"github.com/meshdns/meshdns/internal/certfile"
)

func init() {
	cli.Register("controlplane", cli.Command{
		Summary: "serve name tables to agents (gRPC), from entry files and Kubernetes",
		Run:     runControlPlane,
	})
}

// controlPlaneFlags are the flags of `meshdns controlplane`; each also
// reads MESHDNS_<NAME>. Add a flag here and map it in config.
type controlPlaneFlags struct {
	grpcAddr, adminAddr, clusterDomain string
	probeAddr                          string
	grpcSelfTLS, agentStreamGRPC       bool
	stateDir                           string
	entries, vipCIDRs                  cli.StringList
	tlsCert, tlsKey, clientCA          string
	debounce                           time.Duration
	maxAdmissions, maxConnsPerPeer     int
	logs                               *cli.LogFlags
}

func newControlPlaneFlags(fs *flag.FlagSet) *controlPlaneFlags {
	f := &controlPlaneFlags{}
	fs.StringVar(&f.grpcAddr, "grpc-addr", ":15010", "address of the gRPC NameDiscoveryService")
	fs.StringVar(&f.adminAddr, "admin-addr", "127.0.0.1:15014", "address of the admin HTTP server (/debug/..., /metrics, /healthz/*), loopback only")
	fs.StringVar(&f.probeAddr, "probe-addr", "", "address serving only /metrics and /healthz/* on the network, for the kubelet and Prometheus, e.g. :15015 (empty: off)")
	fs.BoolVar(&f.grpcSelfTLS, "grpc-self-signed", false, "serve gRPC over TLS with the self-managed certificate of --webhook-secret (its CA is what injected agents trust)")
	fs.StringVar(&f.clusterDomain, "cluster-domain", "cluster.local", "the cluster's DNS domain")
	fs.Var(&f.entries, "entries", "entries YAML file or folder of them (repeatable)")
	fs.StringVar(&f.stateDir, "state-dir", "", "directory keeping the last good version of every entries file across restarts")
	fs.Var(&f.vipCIDRs, "vip-cidr", "virtual IP pool for entries without addresses (repeatable; default 240.240.0.0/16 and fd00:240:240::/48)")
	fs.StringVar(&f.tlsCert, "tls-cert", "", "PEM server certificate for gRPC; enables TLS (re-read when it changes)")
	fs.StringVar(&f.tlsKey, "tls-key", "", "PEM key of --tls-cert")
	fs.StringVar(&f.clientCA, "client-ca", "", "PEM CA that must have signed agents' client certificates (mTLS)")
	fs.DurationVar(&f.debounce, "debounce", 100*time.Millisecond, "wait for more source changes before building a version")
	fs.IntVar(&f.maxAdmissions, "max-admissions", 128, "agent streams served their first table at once; more wait their turn (paces reconnect storms)")
	fs.IntVar(&f.maxConnsPerPeer, "max-connections-per-peer", 256, "gRPC connections one IP address may hold open; raise it where many agents share an address (VMs behind NAT)")
	fs.BoolVar(&f.agentStreamGRPC, "agent-stream-grpc", false, "serve the agents' stream on grpc-go, as every other method, instead of the control plane's own lean HTTP/2 server (more CPU and memory per agent; an escape hatch)")
	f.logs = cli.NewLogFlags(fs, "debug, info, warn or error (changeable at runtime: PUT /debug/loglevel?level=)")
	return f
}

// config turns the flags into a controlplane.Config.
func (f *controlPlaneFlags) config(log *slog.Logger, level *slog.LevelVar) (controlplane.Config, error) {
	cfg := controlplane.Config{
		GRPCAddr:              f.grpcAddr,
		AdminAddr:             f.adminAddr,
		ProbeAddr:             f.probeAddr,
		GRPCSelfTLS:           f.grpcSelfTLS,
		ClusterDomain:         f.clusterDomain,
		Entries:               f.entries,
		StateDir:              f.stateDir,
		TLSCert:               f.tlsCert,
		TLSKey:                f.tlsKey,
		ClientCA:              f.clientCA,
		Debounce:              f.debounce,
		MaxAdmissions:         f.maxAdmissions,
		MaxConnectionsPerPeer: f.maxConnsPerPeer,
		GRPCAgentStream:       f.agentStreamGRPC,
		Logger:                log,
		Level:                 level,
	}
	for flag, a := range map[string]string{"--grpc-addr": f.grpcAddr, "--admin-addr": f.adminAddr} {
		if err := cli.HostPort(flag, a); err != nil {
			return cfg, err
		}
	}
	for _, s := range f.vipCIDRs {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return cfg, cli.Usagef("--vip-cidr %q: want a CIDR prefix such as 240.240.0.0/16", s)
		}
		cfg.VIPCIDRs = append(cfg.VIPCIDRs, p)
	}
	return cfg, nil
}

func runControlPlane(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("controlplane", flag.ContinueOnError)
	fs.SetOutput(stdout)
	f := newControlPlaneFlags(fs)
	wf := newWebhookFlags(fs)
	kf := newKubeFlags(fs)
	mf := newMCSFlags(fs)
	af := newAuthFlags(fs)
	df := newDrainFlags(fs)
	sf := newSettingsFlags(fs)
	ff := newFailingFlags(fs)
	pf := newPolicyFlags(fs)
	fwd := newForwardingFlags(fs)
	qf := newQueryLogFlags(fs)
	qrf := newQuarantineFlags(fs)
	if err := cli.ParseFlags(fs, args, nil); err != nil {
		return err
	}
	log, level, err := f.logs.Logger(stderr)
	if err != nil {
		return err
	}
	cfg, err := f.config(log, level)
	if err != nil {
		return err
	}
	if err := qrf.apply(&cfg); err != nil {
		return err
	}
	// One registry for the control plane, the webhook and the build info.
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), buildInfoCollector())
	cfg.Registerer, cfg.Gatherer = reg, reg
	// The API server's address and credentials, read once for the webhook's
	// certificate Secret, the Kubernetes source and TokenReview; nil when
	// there is no kubeconfig and no pod service account.
	rc, err := kubesource.RESTConfig(kf.kubeconfig)
	if err != nil {
		return err
	}
	watchTemplate, err := wf.apply(&cfg, log, rc, pf)
	if err != nil {
		return err
	}
	if err := controlPlanePreflight(cfg, wf); err != nil {
		return err
	}
	if err := kf.apply(&cfg, log, rc); err != nil {
		return err
	}
	if err := mf.apply(&cfg, log, rc); err != nil {
		return err
	}
	if len(cfg.Entries) == 0 && len(cfg.Sources) == 0 {
		if len(pf.files) > 0 {
			return cli.Usagef("--policy-file governs names; give --entries FILE_OR_FOLDER, or --kubeconfig, for names to serve")
		}
		return cli.Usagef("no names to serve: give --entries FILE_OR_FOLDER, or --kubeconfig (in a pod, its service account is used)")
	}
	if err := pf.apply(&cfg, log, rc); err != nil {
		return err
	}
	if err := af.apply(&cfg, log, rc); err != nil {
		return err
	}
	if err := df.apply(&cfg, rc); err != nil {
		return err
	}
	if err := sf.apply(&cfg, log, rc); err != nil {
		return err
	}
	if err := ff.apply(&cfg, log, rc); err != nil {
		return err
	}
	if err := qf.apply(&cfg); err != nil {
		return err
	}
	if err := fwd.apply(&cfg, log, rc); err != nil {
		return err
	}
	cp, err := controlplane.New(cfg)
	if err != nil {
		return err
	}
	return runWithWebhook(ctx, cp.Run, watchTemplate)
}

// controlPlanePreflight refuses, before anything logs that the control
// plane started, sources it could never read: an entries path that does
// not exist or is not readable, a webhook certificate or an injection
// template that does not load.
// With --state-dir a missing entries path is let through: the file source
// serves its last good version from the state (a restart while the file
// is deleted must not take names away) and says so. An entries file with
// bad content is the file source's business too.
func controlPlanePreflight(cfg controlplane.Config, wf *webhookFlags) error {
	for _, p := range cfg.Entries {
		err := cli.Readable("--entries", p)
		if err != nil && !(cfg.StateDir != "" && errors.Is(err, fs.ErrNotExist)) {
			return err
		}
	}
	if wf.template != "" {
		if err := cli.Readable("--inject-template", wf.template); err != nil {
			return err
		}
		data, err := os.ReadFile(wf.template)
		if err != nil {
			return fmt.Errorf("--inject-template: %w", err)
		}
		if _, err := webhook.ParseTemplate(data); err != nil {
			return fmt.Errorf("--inject-template %s: %w", wf.template, err)
		}
	}
	if wf.cert != "" {
		r, err := certfile.New(certfile.Config{CertFile: wf.cert, KeyFile: wf.key})
		if err == nil {
			_, err = r.ServerConfig()
		}
		if err != nil {
			return fmt.Errorf("--webhook-cert/--webhook-key: %w", err)
		}
	}
	return nil
}
