package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/meshdns/meshdns/cmd/internal/cli"
	"github.com/meshdns/meshdns/cni"
)

func init() {
	cli.Register("cni", cli.Command{
		Summary: "install or uninstall the chained CNI plugin on a node (the DaemonSet's container)",
		Usage:   cniUsage,
		Run:     runCNI,
	})
	personalities[cni.PluginType] = runCNIPlugin
}

const cniUsage = `usage: meshdns cni install|uninstall [flags]

  install    copy this binary into the node's CNI bin directory as meshdns-cni, chain it
             into the node's network configuration list, write its kubeconfig, and keep
             them so (its token renewed, a rewritten list repaired) until stopped
  uninstall  take meshdns-cni out of the node's network configuration (the list as it
             was before install, byte for byte, where nothing else changed it since) and
             remove its binary and kubeconfig; with --if-daemonset-gone (the DaemonSet
             pod's preStop), only when the DaemonSet is gone or being deleted, so a
             restarted or upgraded pod keeps the node's pods redirected meanwhile`

// cniFlags are the flags of both actions.
type cniFlags struct {
	binDir, confDir, hostConfDir, confName, tokenDir, server string
	namespace, account, daemonSet, exclude, backend          string
	noIPv6, captureAll, once, ifGone                         bool
	interval, lifetime                                       time.Duration
}

func runCNI(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("cni", flag.ContinueOnError)
	fs.SetOutput(stdout)
	var f cniFlags
	fs.StringVar(&f.binDir, "bin-dir", "/host/opt/cni/bin", "the node's CNI bin directory, as mounted")
	fs.StringVar(&f.confDir, "conf-dir", "/host/etc/cni/net.d", "the node's CNI configuration directory, as mounted")
	fs.StringVar(&f.hostConfDir, "host-conf-dir", "/etc/cni/net.d", "the CNI configuration directory as the node sees it")
	fs.StringVar(&f.confName, "conf-name", "", "the configuration list to chain into; empty: the first one in the directory, as the runtime picks")
	fs.StringVar(&f.tokenDir, "token-dir", "/var/run/secrets/kubernetes.io/serviceaccount", "directory with the service account's token and ca.crt")
	fs.StringVar(&f.server, "kube-server", "", "API server URL the plugin uses from the node; empty: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT")
	fs.StringVar(&f.namespace, "namespace", "", "the installer's namespace (env POD_NAMESPACE), never injected; its ServiceAccount's token goes to the plugin")
	fs.StringVar(&f.account, "service-account", "meshdns-cni", "the installer's ServiceAccount, whose token the plugin gets")
	fs.StringVar(&f.daemonSet, "daemonset", "meshdns-cni", "the installer's DaemonSet, for uninstall --if-daemonset-gone")
	fs.StringVar(&f.exclude, "exclude-namespaces", "meshdns-system", "comma-separated namespaces whose pods the plugin passes with no API call, besides kube-system, kube-public, kube-node-lease and --namespace")
	fs.StringVar(&f.backend, "backend", "auto", "iptables backend in pods: auto, legacy or nft")
	fs.BoolVar(&f.noIPv6, "disable-ipv6", false, "write IPv4 rules only in pods")
	fs.BoolVar(&f.captureAll, "capture-all-dns", false, "redirect all port 53 traffic in pods, whatever the destination")
	fs.DurationVar(&f.interval, "interval", 30*time.Second, "how often the installation is checked and repaired")
	fs.DurationVar(&f.lifetime, "token-lifetime", 24*time.Hour, "lifetime of the plugin's token, renewed at half; how long the plugin outlives a deleted installer")
	fs.BoolVar(&f.once, "once", false, "install once and exit")
	fs.BoolVar(&f.ifGone, "if-daemonset-gone", false, "uninstall only when the DaemonSet is gone or being deleted (the preStop hook)")
	if len(args) == 0 {
		return cli.Usagef("no action given (want install or uninstall)")
	}
	if args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help" {
		cli.PrintHelp(stdout, fs)
		return flag.ErrHelp
	}
	action := args[0]
	if action != "install" && action != "uninstall" {
		return cli.Usagef("unknown action %q (want install or uninstall)", action)
	}
	if err := cli.ParseFlags(fs, args[1:], map[string][]string{"namespace": {"POD_NAMESPACE"}}); err != nil {
		return err
	}
	if f.server == "" {
		host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
		if host != "" && port != "" {
			f.server = "https://" + net.JoinHostPort(host, port)
		}
	}
	log := slog.New(slog.NewTextHandler(stderr, nil)).With("component", "cni-"+action)
	if action == "uninstall" {
		return cniUninstall(ctx, f, log)
	}
	return cniInstall(ctx, f, log)
}

func cniInstall(ctx context.Context, f cniFlags, log *slog.Logger) error {
	if f.server == "" {
		return errors.New("--kube-server is empty and KUBERNETES_SERVICE_HOST/PORT are not set")
	}
	if f.interval <= 0 {
		return cli.Usagef("--interval %s must be positive", f.interval)
	}
	if f.lifetime < 10*time.Minute {
		return cli.Usagef("--token-lifetime %s: the API server's minimum is 10m", f.lifetime)
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find own binary: %w", err)
	}
	opts := map[string]any{}
	if f.backend != "" && f.backend != "auto" {
		opts["backend"] = f.backend
	}
	if f.noIPv6 {
		opts["disableIPv6"] = true
	}
	if f.captureAll {
		opts["captureAllDNS"] = true
	}
	if ex := excludedNamespaces(f); len(ex) > 0 {
		opts["excludeNamespaces"] = ex
	}
	cred := &cniCredential{server: f.server, tokenDir: f.tokenDir, namespace: f.namespace, account: f.account,
		lifetime: f.lifetime, log: log, now: time.Now}
	install := func() error {
		kc, err := cred.kubeconfig(ctx)
		if err != nil {
			return err
		}
		changed, err := cni.Install(cni.InstallConfig{Binary: self, BinDir: f.binDir, ConfDir: f.confDir,
			HostConfDir: f.hostConfDir, ConfName: f.confName, Kubeconfig: kc, Options: opts})
		if err != nil {
			return fmt.Errorf("install: %w", err)
		}
		if changed {
			log.Info("meshdns-cni installed", "bin_dir", f.binDir, "conf_dir", f.confDir)
		}
		cred.check(ctx, filepath.Join(f.confDir, cni.KubeconfigName))
		return nil
	}
	if f.once {
		return install()
	}
	t := time.NewTicker(f.interval)
	defer t.Stop()
	for {
		// A failed round (no network configuration yet: the pod network's
		// own installer has not run) is retried on the next tick.
		if err := install(); err != nil {
			log.Error("install failed", "err", err)
		}
		select {
		case <-ctx.Done():
			// The preStop hook has decided already; a round that ran
			// between it and this SIGTERM may have installed again, so
			// the same decision is made once more.
			f.ifGone = true
			return cniUninstall(context.WithoutCancel(ctx), f, log)
		case <-t.C:
		}
	}
}

// excludedNamespaces are the namespaces written into the plugin's entry.
func excludedNamespaces(f cniFlags) []string {
	var out []string
	for _, n := range append(strings.Split(f.exclude, ","), f.namespace) {
		if n = strings.TrimSpace(n); n != "" && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

// cniUninstall removes the plugin; with --if-daemonset-gone only when the
// DaemonSet is gone or being deleted. When that cannot be known (the API
// server does not answer), it removes it too: a node must go on creating
// pods, and without an API server no new pod reaches the node anyway.
func cniUninstall(ctx context.Context, f cniFlags, log *slog.Logger) error {
	if f.ifGone {
		gone, err := daemonSetGone(ctx, f)
		switch {
		case err != nil:
			log.Warn("cannot tell whether the DaemonSet is being removed: uninstalling", "err", err)
		case !gone:
			log.Info("the DaemonSet is still there (a restart or an upgrade): meshdns-cni stays installed",
				"daemonset", f.namespace+"/"+f.daemonSet)
			return nil
		}
	}
	if err := cni.Uninstall(cni.InstallConfig{BinDir: f.binDir, ConfDir: f.confDir, ConfName: f.confName}); err != nil {
		return fmt.Errorf("uninstall: %w", err)
	}
	log.Info("meshdns-cni uninstalled", "bin_dir", f.binDir, "conf_dir", f.confDir)
	return nil
}

// daemonSetGone reports whether the installer's DaemonSet is deleted or
// being deleted, with the installer's own token.
func daemonSetGone(ctx context.Context, f cniFlags) (bool, error) {
	if f.server == "" || f.namespace == "" {
		return false, errors.New("--kube-server and --namespace are needed to find the DaemonSet")
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	var ds struct {
		Metadata struct {
			DeletionTimestamp *string `json:"deletionTimestamp"`
		} `json:"metadata"`
	}
	path := "/apis/apps/v1/namespaces/" + url.PathEscape(f.namespace) + "/daemonsets/" + url.PathEscape(f.daemonSet)
	status, err := installerCall(ctx, f.server, f.tokenDir, http.MethodGet, path, nil, &ds)
	if status == http.StatusNotFound {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	return ds.Metadata.DeletionTimestamp != nil, nil
}
