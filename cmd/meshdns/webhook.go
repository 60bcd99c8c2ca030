package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/meshdns/meshdns/controlplane"
	"github.com/meshdns/meshdns/controlplane/webhook"
)

// webhookFlags are the sidecar injector's flags of `meshdns controlplane`.
// The injector is on when --webhook-cert is given.
type webhookFlags struct {
	addr, cert, key, template string
	failClosed                bool
}

func newWebhookFlags(fs *flag.FlagSet) *webhookFlags {
	f := &webhookFlags{}
	fs.StringVar(&f.addr, "webhook-addr", ":15017", "HTTPS address of the sidecar injection webhook (/inject, /inject/annotated)")
	fs.StringVar(&f.cert, "webhook-cert", "", "PEM serving certificate of the webhook; turns the webhook on (re-read when it changes)")
	fs.StringVar(&f.key, "webhook-key", "", "PEM key of --webhook-cert")
	fs.StringVar(&f.template, "inject-template", "", "YAML/JSON injection template (image, resources, ports...), re-read when it changes")
	fs.BoolVar(&f.failClosed, "webhook-fail-closed", false, "deny pods the webhook cannot inject instead of admitting them uninjected")
	return f
}

// apply builds the injector into cfg when the webhook is on, and returns
// what must run beside the control plane (the template watch), or nil.
func (f *webhookFlags) apply(cfg *controlplane.Config, log *slog.Logger) (func(context.Context) error, error) {
	if f.cert == "" && f.key == "" {
		if f.template != "" || f.failClosed {
			return nil, errors.New("--inject-template and --webhook-fail-closed need --webhook-cert and --webhook-key")
		}
		return nil, nil
	}
	if f.cert == "" || f.key == "" {
		return nil, errors.New("--webhook-cert and --webhook-key go together")
	}
	// One registry for the control plane and the webhook, so /metrics on
	// the admin port shows both; the same default New would make.
	if cfg.Registerer == nil && cfg.Gatherer == nil {
		reg := prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		cfg.Registerer, cfg.Gatherer = reg, reg
	}
	w, err := webhook.New(webhook.Config{
		Addr:         f.addr,
		CertFile:     f.cert,
		KeyFile:      f.key,
		TemplateFile: f.template,
		FailClosed:   f.failClosed,
		Logger:       log.With("component", "webhook"),
		Registerer:   cfg.Registerer,
	})
	if err != nil {
		return nil, err
	}
	// The control plane serves the handler with its own certificate
	// reloader; the template is watched beside it.
	cfg.Webhook, cfg.WebhookAddr, cfg.WebhookCert, cfg.WebhookKey = w, f.addr, f.cert, f.key
	return w.WatchTemplate, nil
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
