//go:build !agentonly

package main

import (
	"context"
	"encoding/json"
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
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/meshdns/meshdns/cni"
)

func init() {
	commands["cni"] = command{
		summary: "install the chained CNI plugin on a node (the DaemonSet's container)",
		run:     runCNI,
	}
	personalities[cni.PluginType] = runCNIPlugin
}

// runCNIPlugin is the binary called as meshdns-cni by the container runtime:
// the CNI protocol instead of subcommands. It returns the exit status.
func runCNIPlugin(ctx context.Context, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) int {
	log := slog.New(slog.NewTextHandler(stderr, nil)).With("component", "meshdns-cni")
	p, err := cni.New(cni.Config{Pods: podAnnotations, Logger: log})
	if err == nil {
		var in []byte
		if in, err = io.ReadAll(stdin); err == nil {
			// The runtime gives a plugin no deadline; a stuck API server
			// must not hold the pod's sandbox forever.
			ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			err = p.Exec(ctx, cni.ArgsFromEnv(getenv), in, stdout)
		}
	}
	if err != nil {
		cni.WriteError(stdout, err)
		return 1
	}
	return 0
}

// podAnnotations reads one pod's metadata with the plugin's kubeconfig: a
// plain GET, since the plugin runs once per pod and needs no informer.
func podAnnotations(ctx context.Context, kubeconfig, namespace, name string) (map[string]string, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
	}
	cfg.UserAgent = "meshdns-cni"
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	u := fmt.Sprintf("%s/api/v1/namespaces/%s/pods/%s", cfg.Host, url.PathEscape(namespace), url.PathEscape(name))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound:
		return nil, nil
	default:
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("%s: %s", resp.Status, b)
	}
	var pod struct {
		Metadata struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 4<<20)).Decode(&pod); err != nil {
		return nil, fmt.Errorf("decode pod: %w", err)
	}
	return pod.Metadata.Annotations, nil
}

const cniUsage = `usage: meshdns cni install [flags]

  install  copy this binary into the node's CNI bin directory as meshdns-cni, chain it
           into the node's network configuration list, write its kubeconfig, and keep
           them so (the service account token is renewed, a rewritten list repaired)
           until stopped

flags (each also read from MESHDNS_<FLAG_NAME>):`

func runCNI(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("cni", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, cniUsage)
		fs.PrintDefaults()
	}
	var (
		binDir      = fs.String("bin-dir", "/host/opt/cni/bin", "the node's CNI bin directory, as mounted")
		confDir     = fs.String("conf-dir", "/host/etc/cni/net.d", "the node's CNI configuration directory, as mounted")
		hostConfDir = fs.String("host-conf-dir", "/etc/cni/net.d", "the CNI configuration directory as the node sees it")
		confName    = fs.String("conf-name", "", "the configuration list to chain into; empty: the first one in the directory, as the runtime picks")
		tokenDir    = fs.String("token-dir", "/var/run/secrets/kubernetes.io/serviceaccount", "directory with the service account's token and ca.crt")
		server      = fs.String("kube-server", "", "API server URL the plugin uses from the node; empty: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT")
		backend     = fs.String("backend", "auto", "iptables backend in pods: auto, legacy or nft")
		noIPv6      = fs.Bool("disable-ipv6", false, "write IPv4 rules only in pods")
		captureAll  = fs.Bool("capture-all-dns", false, "redirect all port 53 traffic in pods, whatever the destination")
		interval    = fs.Duration("interval", 30*time.Second, "how often the installation is checked and repaired")
		once        = fs.Bool("once", false, "install once and exit")
	)
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fs.Usage()
		return flag.ErrHelp
	}
	if args[0] != "install" {
		fs.Usage()
		return fmt.Errorf("cni: unknown action %q (want install)", args[0])
	}
	if err := parseFlags(fs, args[1:], nil); err != nil {
		return err
	}
	if *server == "" {
		host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
		if host == "" || port == "" {
			return errors.New("--kube-server is empty and KUBERNETES_SERVICE_HOST/PORT are not set")
		}
		*server = "https://" + net.JoinHostPort(host, port)
	}
	if *interval <= 0 {
		return fmt.Errorf("--interval %s must be positive", *interval)
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find own binary: %w", err)
	}
	log := slog.New(slog.NewTextHandler(stderr, nil)).With("component", "cni-install")
	opts := map[string]any{}
	if *backend != "" && *backend != "auto" {
		opts["backend"] = *backend
	}
	if *noIPv6 {
		opts["disableIPv6"] = true
	}
	if *captureAll {
		opts["captureAllDNS"] = true
	}
	install := func() error {
		kc, err := pluginKubeconfig(*server, *tokenDir)
		if err != nil {
			return err
		}
		changed, err := cni.Install(cni.InstallConfig{Binary: self, BinDir: *binDir, ConfDir: *confDir,
			HostConfDir: *hostConfDir, ConfName: *confName, Kubeconfig: kc, Options: opts})
		if err != nil {
			return fmt.Errorf("install: %w", err)
		}
		if changed {
			log.Info("meshdns-cni installed", "bin_dir", *binDir, "conf_dir", *confDir)
		}
		return nil
	}
	if *once {
		return install()
	}
	t := time.NewTicker(*interval)
	defer t.Stop()
	for {
		// A failed round (no network configuration yet: the pod network's
		// own installer has not run) is retried on the next tick.
		if err := install(); err != nil {
			log.Error("install failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// pluginKubeconfig is the plugin's kubeconfig: the installer's service
// account token and CA, read afresh each round so a renewed token reaches
// the node.
func pluginKubeconfig(server, tokenDir string) ([]byte, error) {
	token, err := os.ReadFile(filepath.Join(tokenDir, "token"))
	if err != nil {
		return nil, fmt.Errorf("read service account token: %w", err)
	}
	ca, err := os.ReadFile(filepath.Join(tokenDir, "ca.crt"))
	if err != nil {
		return nil, fmt.Errorf("read service account CA: %w", err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["cluster"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	cfg.AuthInfos["meshdns-cni"] = &clientcmdapi.AuthInfo{Token: string(token)}
	cfg.Contexts["meshdns-cni"] = &clientcmdapi.Context{Cluster: "cluster", AuthInfo: "meshdns-cni"}
	cfg.CurrentContext = "meshdns-cni"
	return clientcmd.Write(*cfg)
}
