package cni

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"time"

	"github.com/meshdns/meshdns/iptables"
)

// SupportedVersions are the CNI spec versions the plugin speaks. It only
// passes prevResult on, so every version since chaining (0.3.0) works.
var SupportedVersions = []string{"0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"}

// PodAnnotations returns the annotations of pod namespace/name, read with
// the kubeconfig at path. A pod that does not exist returns (nil, nil); a
// credential the API server refuses returns an error wrapping
// ErrCredentialRejected.
type PodAnnotations func(ctx context.Context, kubeconfig, namespace, name string) (map[string]string, error)

// ErrCredentialRejected is what a PodAnnotations returns when the API
// server refuses the plugin's kubeconfig (401): the installer renews that
// credential, so the installer is not running on the node.
var ErrCredentialRejected = errors.New("the API server rejected the plugin's credential")

// NeverInjected are the namespaces the plugin decides from CNI_ARGS alone,
// with no API call: the webhook never injects them either, and the node's
// own pods (kube-proxy, the network plugin, the API server's static pod)
// must start when the API server cannot answer. The network configuration
// adds more (excludeNamespaces: the installer adds meshdns's own).
var NeverInjected = []string{"kube-system", "kube-public", "kube-node-lease"}

// DefaultLookupTimeout bounds the pod lookup when Config.LookupTimeout is
// zero: long enough for an API server under load, short enough that a pod
// whose lookup cannot be answered fails its sandbox, with a clear error,
// and the kubelet retries it.
const DefaultLookupTimeout = 10 * time.Second

// Config of a Plugin.
type Config struct {
	// Pods looks pods up; required.
	Pods PodAnnotations
	// Runner returns the iptables runner for a network namespace path;
	// nil means NetNSRunner.
	Runner func(netns string) iptables.Runner
	// Logger receives one line per programmed pod (the runtime keeps the
	// plugin's stderr in its log); nil discards.
	Logger *slog.Logger
	// LookupTimeout bounds the pod lookup; zero means
	// DefaultLookupTimeout.
	LookupTimeout time.Duration
}

// Plugin is the chained CNI plugin.
type Plugin struct {
	cfg Config
}

// New checks cfg; it does no I/O.
func New(cfg Config) (*Plugin, error) {
	if cfg.Pods == nil {
		return nil, errors.New("cni: Config.Pods is nil")
	}
	if cfg.Runner == nil {
		cfg.Runner = func(netns string) iptables.Runner { return NetNSRunner{Path: netns} }
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.LookupTimeout <= 0 {
		cfg.LookupTimeout = DefaultLookupTimeout
	}
	return &Plugin{cfg: cfg}, nil
}

// Exec runs one CNI call: args from the environment, the configuration on
// stdin, the result on stdout. The caller reports an error with WriteError
// and a non-zero exit status.
func (p *Plugin) Exec(ctx context.Context, args Args, stdin []byte, stdout io.Writer) error {
	switch args.Command {
	case "VERSION":
		return json.NewEncoder(stdout).Encode(map[string]any{"cniVersion": "1.1.0", "supportedVersions": SupportedVersions})
	case "DEL", "GC", "STATUS":
		// The rules live in the pod's network namespace and go with it.
		return nil
	case "ADD", "CHECK":
	default:
		return fmt.Errorf("unknown CNI_COMMAND %q", args.Command)
	}
	conf, err := parseNetConf(stdin)
	if err != nil {
		return err
	}
	if args.Command == "ADD" {
		if len(conf.PrevResult) == 0 {
			return errors.New("no prevResult: meshdns-cni only runs chained after the pod's network plugin")
		}
	}
	red, ok, err := p.redirect(ctx, conf, args)
	if err != nil || !ok {
		if err == nil && args.Command == "ADD" {
			_, err = stdout.Write(conf.PrevResult)
		}
		return err
	}
	m, capture, err := p.manager(conf, args, red)
	if err != nil {
		return err
	}
	if args.Command == "CHECK" {
		drift, err := m.Check(ctx)
		if err != nil {
			return fmt.Errorf("check rules of %s/%s: %w", args.Namespace, args.Pod, err)
		}
		if drift {
			return fmt.Errorf("the DNS redirect of %s/%s is not in place", args.Namespace, args.Pod)
		}
		return nil
	}
	if err := m.Apply(ctx); err != nil {
		return fmt.Errorf("apply rules for %s/%s: %w", args.Namespace, args.Pod, err)
	}
	p.cfg.Logger.Info("DNS redirect applied", "namespace", args.Namespace, "pod", args.Pod, "netns", args.NetNS,
		"proxy_port", red.DNSPort, "capture", capture)
	_, err = stdout.Write(conf.PrevResult)
	return err
}

// redirect looks the pod up and returns its Redirect; ok is false for a
// pod meshdns does not program (not a Kubernetes pod, in a namespace never
// injected, not injected in CNI mode, gone).
//
// A pod in any other namespace that cannot be looked up fails closed: the
// runtime retries the sandbox rather than start a pod that may be injected
// with DNS that bypasses its agent. The lookup is bounded (LookupTimeout),
// so a pod never waits on an API server that does not answer.
func (p *Plugin) redirect(ctx context.Context, conf NetConf, args Args) (Redirect, bool, error) {
	if args.Namespace == "" || args.Pod == "" {
		return Redirect{}, false, nil
	}
	if slices.Contains(NeverInjected, args.Namespace) || slices.Contains(conf.ExcludeNamespaces, args.Namespace) {
		return Redirect{}, false, nil
	}
	if conf.Kubeconfig == "" {
		return Redirect{}, false, errors.New("network configuration: no kubeconfig")
	}
	lctx, cancel := context.WithTimeout(ctx, p.cfg.LookupTimeout)
	defer cancel()
	ann, err := p.cfg.Pods(lctx, conf.Kubeconfig, args.Namespace, args.Pod)
	switch {
	case err == nil:
	case errors.Is(err, ErrCredentialRejected):
		return Redirect{}, false, fmt.Errorf("get pod %s/%s: %w; the meshdns-cni installer renews it: "+
			"is its DaemonSet pod running on this node? (pods of excluded namespaces still start)", args.Namespace, args.Pod, err)
	case lctx.Err() != nil && ctx.Err() == nil:
		return Redirect{}, false, fmt.Errorf("get pod %s/%s: the API server did not answer within %s (%w): "+
			"the sandbox fails so that an injected pod never starts without its DNS redirect; the kubelet retries it",
			args.Namespace, args.Pod, p.cfg.LookupTimeout, err)
	default:
		return Redirect{}, false, fmt.Errorf("get pod %s/%s: %w", args.Namespace, args.Pod, err)
	}
	v, ok := ann[AnnotationRedirect]
	if !ok {
		return Redirect{}, false, nil
	}
	r, err := ParseRedirect(v)
	if err != nil {
		return Redirect{}, false, err
	}
	return r, true, nil
}

// manager builds the iptables manager for the pod's namespace; capture
// says what port 53 traffic it redirects, for the log.
func (p *Plugin) manager(conf NetConf, args Args, r Redirect) (*iptables.Manager, string, error) {
	if args.NetNS == "" {
		return nil, "", errors.New("no CNI_NETNS")
	}
	ns, err := conf.nameservers()
	if err != nil {
		return nil, "", err
	}
	capture := "all"
	if len(ns) > 0 {
		capture = fmt.Sprint(ns)
	}
	cfg := iptables.Config{
		ProxyPort:     uint16(r.DNSPort),
		Nameservers:   ns,
		CaptureAllDNS: len(ns) == 0,
		Backend:       iptables.Backend(conf.Backend),
		DisableIPv6:   conf.DisableIPv6,
		Runner:        p.cfg.Runner(args.NetNS),
		Logger:        p.cfg.Logger,
	}
	if r.ProxyUID > 0 {
		cfg.ProxyUIDs = []uint32{uint32(r.ProxyUID)}
	}
	if r.ProxyGID > 0 {
		cfg.ProxyGIDs = []uint32{uint32(r.ProxyGID)}
	}
	m, err := iptables.New(cfg)
	return m, capture, err
}

// WriteError writes err as a CNI error result (code 999: a plugin error)
// in the configuration's version, for the runtime to log.
func WriteError(w io.Writer, err error) {
	_ = json.NewEncoder(w).Encode(map[string]any{"cniVersion": "1.0.0", "code": 999, "msg": err.Error()})
}
