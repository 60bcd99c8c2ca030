package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"

	"github.com/meshdns/meshdns/cmd/internal/cli"
	"github.com/meshdns/meshdns/controlplane"
	"github.com/meshdns/meshdns/controlplane/selfcert"
	"github.com/meshdns/meshdns/controlplane/webhook"
)

// webhookFlags are the sidecar injector's flags of `meshdns controlplane`.
// The injector is on when --webhook-cert is given.
type webhookFlags struct {
	addr, cert, key, template string
	image                     string // --inject-image, or ""
	injectCA                  string // --inject-ca, or ""
	failClosed                bool
	// self-managed certificates (selfcert)
	secret, dnsNames, configs string
}

func newWebhookFlags(fs *flag.FlagSet) *webhookFlags {
	f := &webhookFlags{}
	fs.StringVar(&f.addr, "webhook-addr", ":15017", "HTTPS address of the sidecar injection webhook (/inject, /inject/annotated)")
	fs.StringVar(&f.cert, "webhook-cert", "", "PEM serving certificate of the webhook; turns the webhook on (re-read when it changes)")
	fs.StringVar(&f.key, "webhook-key", "", "PEM key of --webhook-cert")
	fs.StringVar(&f.template, "inject-template", "", "YAML/JSON injection template (image, resources, ports...), re-read when it changes")
	fs.StringVar(&f.image, "inject-image", "", "image of the injected init container and sidecar, usually the control plane's own (the install sets it from the one image it names); an image in --inject-template wins")
	fs.StringVar(&f.injectCA, "inject-ca", "", "PEM CA bundle injected agents trust for the control plane's gRPC certificate, re-read when it changes; needed with a mounted --tls-cert (cert-manager's ca.crt), wins over the self-managed CA of --webhook-secret")
	fs.BoolVar(&f.failClosed, "webhook-fail-closed", false, "deny pods the webhook cannot inject instead of admitting them uninjected")
	fs.StringVar(&f.secret, "webhook-secret", "", "NAMESPACE/NAME of a Secret where the control plane keeps a CA and the webhook's serving certificate it makes and renews itself; turns the webhook on without --webhook-cert")
	fs.StringVar(&f.dnsNames, "webhook-dns-names", "", "comma-separated DNS names and IPs of the self-managed certificate (default meshdns-controlplane.NAMESPACE.svc of --webhook-secret)")
	fs.StringVar(&f.configs, "webhook-configs", "meshdns-sidecar-injector", "comma-separated MutatingWebhookConfigurations whose caBundle the control plane keeps equal to its CA (with --webhook-secret)")
	return f
}

// apply builds the injector into cfg when the webhook is on, and returns
// what must run beside the control plane (the template watch), or nil.
// The webhook asks pf's policy store, once built, which pods an enforcing
// DNS policy selects.
func (f *webhookFlags) apply(cfg *controlplane.Config, log *slog.Logger, rc *rest.Config, pf *policyFlags) (func(context.Context) error, error) {
	if f.cert == "" && f.key == "" && f.secret == "" {
		if f.template != "" || f.failClosed || f.injectCA != "" {
			return nil, cli.Usagef("--inject-template, --inject-ca and --webhook-fail-closed need --webhook-secret or --webhook-cert and --webhook-key")
		}
		return nil, nil
	}
	if f.cert == "" != (f.key == "") {
		return nil, cli.Usagef("--webhook-cert and --webhook-key go together")
	}
	if f.cert != "" && f.secret != "" {
		return nil, cli.Usagef("--webhook-secret and --webhook-cert exclude each other: the certificate is self-managed or mounted")
	}
	// The injected agents trust the CA of --inject-ca, else the
	// self-managed CA (the manager is made below, after the webhook it
	// serves). With a mounted certificate and neither, agents get no CA
	// and dial in plaintext: only a control plane that serves plaintext
	// (no --tls-cert) can take them.
	var certs *selfcert.Manager
	caBundle := func() []byte {
		if certs == nil {
			return nil
		}
		return certs.CABundle()
	}
	if f.injectCA != "" {
		ca, err := loadInjectCA(f.injectCA, log.With("component", "webhook"))
		if err != nil {
			return nil, err
		}
		caBundle = ca.bundle
	}
	// Agents read the CA from a ConfigMap of their namespace that the
	// control plane keeps current from a watch of namespaces, so a CA
	// rotation needs no pod restart; without API access (or before the
	// watch made it) the webhook projects the pod's annotation.
	var caMaps *webhook.CAConfigMaps
	if rc != nil && (f.injectCA != "" || f.secret != "") {
		var err error
		caMaps, err = webhook.NewCAConfigMaps(webhook.CAConfigMapsConfig{Config: rc, Bundle: func() []byte { return caBundle() },
			Excluded: caExcluded(f.secret), Logger: log.With("component", "ca-configmaps")})
		if err != nil {
			return nil, err
		}
	}
	w, err := webhook.New(webhook.Config{
		Template:     webhook.Template{Image: f.image, ClusterDomain: cfg.ClusterDomain},
		CABundle:     caBundle,
		CAConfigMaps: caMaps,
		Policies:     storePolicies{pf},
		TemplateFile: f.template,
		FailClosed:   f.failClosed,
		Logger:       log.With("component", "webhook"),
		Registerer:   cfg.Registerer,
	})
	if err != nil {
		return nil, err
	}
	// The control plane serves the handler with its own certificate
	// reloader (or the self-managed certificates); the template is watched
	// beside it.
	cfg.Webhook, cfg.WebhookAddr, cfg.WebhookCert, cfg.WebhookKey = w, f.addr, f.cert, f.key
	if f.secret != "" {
		if cfg.WebhookCerts, err = f.selfManaged(cfg, log, rc); err != nil {
			return nil, err
		}
		certs = cfg.WebhookCerts
	}
	if caMaps == nil {
		return w.WatchTemplate, nil
	}
	return func(ctx context.Context) error {
		ctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = caMaps.Run(ctx, 5*time.Second, 10*time.Minute)
		}()
		err := w.WatchTemplate(ctx)
		cancel()
		<-done
		return err
	}, nil
}

// caExcluded are the namespaces that get no CA ConfigMap: the ones the
// webhook configuration never sends pods from, and the control plane's own
// (the namespace of --webhook-secret).
func caExcluded(secret string) []string {
	out := slices.Clone(webhook.DefaultCAExcludedNamespaces)
	if ns, _, ok := strings.Cut(secret, "/"); ok && ns != "" && !slices.Contains(out, ns) {
		out = append(out, ns)
	}
	return out
}

// storePolicies answers the webhook from the policy store of
// --watch-policies and --policy-file, built after the webhook; without
// one, nothing is enforced at admission.
type storePolicies struct{ pf *policyFlags }

func (p storePolicies) Enforced(namespace string, podLabels map[string]string) bool {
	return p.pf != nil && p.pf.store != nil && p.pf.store.Enforced(namespace, podLabels)
}

func (p storePolicies) EnforcedIn(namespace string) bool {
	return p.pf != nil && p.pf.store != nil && p.pf.store.EnforcedIn(namespace)
}

// selfManaged builds the certificate manager of --webhook-secret.
func (f *webhookFlags) selfManaged(cfg *controlplane.Config, log *slog.Logger, rc *rest.Config) (*selfcert.Manager, error) {
	ns, name, ok := strings.Cut(f.secret, "/")
	if !ok || ns == "" || name == "" {
		return nil, cli.Usagef("--webhook-secret %q: want NAMESPACE/NAME", f.secret)
	}
	if rc == nil {
		return nil, cli.Usagef("--webhook-secret needs --kubeconfig or an in-cluster service account")
	}
	api, err := selfcert.NewAPI(rc)
	if err != nil {
		return nil, err
	}
	var names []string
	var ips []net.IP
	for _, n := range splitList(f.dnsNames) {
		if ip := net.ParseIP(n); ip != nil {
			ips = append(ips, ip)
		} else {
			names = append(names, n)
		}
	}
	if len(names)+len(ips) == 0 {
		names = []string{"meshdns-controlplane." + ns + ".svc"}
	}
	return selfcert.New(selfcert.Config{
		API: api, Namespace: ns, SecretName: name, DNSNames: names, IPs: ips, WebhookConfigs: splitList(f.configs),
		Logger: log.With("component", "webhook-certs"), Registerer: cfg.Registerer,
	})
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// runWithWebhook runs the control plane and, when set, the template watch;
// the first to fail stops the other.
func runWithWebhook(ctx context.Context, run, watch func(context.Context) error) error {
	if watch == nil {
		return run(ctx)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var watchErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := watch(ctx); err != nil {
			watchErr = fmt.Errorf("inject template: %w", err)
			cancel()
		}
	}()
	err := run(ctx)
	cancel()
	wg.Wait()
	return errors.Join(watchErr, err)
}
