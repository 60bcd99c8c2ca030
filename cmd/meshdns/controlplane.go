//go:build !agentonly

package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"time"

	"github.com/meshdns/meshdns/controlplane"
)

func init() {
	commands["controlplane"] = command{
		summary: "serve name tables to agents (gRPC), from entry files and Kubernetes",
		run:     runControlPlane,
	}
}

// controlPlaneFlags are the flags of `meshdns controlplane`; each also
// reads MESHDNS_<NAME>. Add a flag here and map it in config.
type controlPlaneFlags struct {
	grpcAddr, adminAddr, clusterDomain string
	stateDir                           string
	entries, vipCIDRs                  stringList
	tlsCert, tlsKey, clientCA          string
	debounce                           time.Duration
	maxAdmissions                      int
	logLevel                           string
}

func newControlPlaneFlags(fs *flag.FlagSet) *controlPlaneFlags {
	f := &controlPlaneFlags{}
	fs.StringVar(&f.grpcAddr, "grpc-addr", ":15010", "address of the gRPC NameDiscoveryService")
	fs.StringVar(&f.adminAddr, "admin-addr", ":15014", "address of the admin HTTP server (/metrics, /healthz/ready, /debug/...)")
	fs.StringVar(&f.clusterDomain, "cluster-domain", "cluster.local", "the cluster's DNS domain")
	fs.Var(&f.entries, "entries", "entries YAML file or folder of them (repeatable)")
	fs.StringVar(&f.stateDir, "state-dir", "", "directory keeping the last good version of every entries file across restarts")
	fs.Var(&f.vipCIDRs, "vip-cidr", "virtual IP pool for entries without addresses (repeatable; default 240.240.0.0/16 and fd00:240:240::/48)")
	fs.StringVar(&f.tlsCert, "tls-cert", "", "PEM server certificate for gRPC; enables TLS (re-read when it changes)")
	fs.StringVar(&f.tlsKey, "tls-key", "", "PEM key of --tls-cert")
	fs.StringVar(&f.clientCA, "client-ca", "", "PEM CA that must have signed agents' client certificates (mTLS)")
	fs.DurationVar(&f.debounce, "debounce", 100*time.Millisecond, "wait for more source changes before building a version")
	fs.IntVar(&f.maxAdmissions, "max-admissions", 128, "agent streams served their first table at once; more wait their turn (paces reconnect storms)")
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error (changeable at runtime: PUT /debug/loglevel?level=)")
	return f
}

// config turns the flags into a controlplane.Config.
func (f *controlPlaneFlags) config(log *slog.Logger, level *slog.LevelVar) (controlplane.Config, error) {
	cfg := controlplane.Config{
		GRPCAddr:      f.grpcAddr,
		AdminAddr:     f.adminAddr,
		ClusterDomain: f.clusterDomain,
		Entries:       f.entries,
		StateDir:      f.stateDir,
		TLSCert:       f.tlsCert,
		TLSKey:        f.tlsKey,
		ClientCA:      f.clientCA,
		Debounce:      f.debounce,
		MaxAdmissions: f.maxAdmissions,
		Logger:        log,
		Level:         level,
	}
	for _, s := range f.vipCIDRs {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return cfg, fmt.Errorf("--vip-cidr %q: %w", s, err)
		}
		cfg.VIPCIDRs = append(cfg.VIPCIDRs, p)
	}
	return cfg, nil
}

func runControlPlane(ctx context.Context, args []string, _, stderr io.Writer) error {
	fs := flag.NewFlagSet("controlplane", flag.ContinueOnError)
	fs.SetOutput(stderr)
	f := newControlPlaneFlags(fs)
	wf := newWebhookFlags(fs)
	kf := newKubeFlags(fs)
	if err := parseFlags(fs, args, nil); err != nil {
		return err
	}
	level := new(slog.LevelVar)
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	cfg, err := f.config(log, level)
	if err != nil {
		return err
	}
	watchTemplate, err := wf.apply(&cfg, log, kf.kubeconfig)
	if err != nil {
		return err
	}
	if err := kf.apply(&cfg, log); err != nil {
		return err
	}
	cp, err := controlplane.New(cfg)
	if err != nil {
		return err
	}
	return runWithWebhook(ctx, cp.Run, watchTemplate)
}
