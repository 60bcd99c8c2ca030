package webhook

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshdns/meshdns/internal/filewatch"
)

// Config configures a Webhook. The zero value of each field is documented.
type Config struct {
	// Template is the default template, layered on DefaultTemplate.
	Template Template
	// TemplateFile is an optional YAML or JSON Template layered on
	// Template, re-read whenever it changes (WatchTemplate). "" means
	// Template alone. A file that does not parse keeps the last good
	// template.
	TemplateFile string
	// FailClosed denies a pod the webhook cannot inject because of an
	// internal error. The default (false) admits the pod uninjected with a
	// warning, matching failurePolicy: Ignore: DNS interception is not
	// worth blocking a rollout.
	FailClosed bool
	// PollInterval is how often the template file is checked in case a
	// change event was missed; 0 means 10s.
	PollInterval time.Duration
	// MaxRequestBytes caps an AdmissionReview body; 0 means 4 MiB. The API
	// server takes request bodies of 3 MiB at most (and stores objects of
	// 1.5 MiB); the cap guards against anything else that can reach the
	// port.
	MaxRequestBytes int64
	// MaxConcurrentReviews bounds the reviews being decoded and decided at
	// once; 0 means 4. Each takes well under a millisecond for an
	// ordinary pod, so the API server's reviews seldom wait.
	MaxConcurrentReviews int
	// MaxLargeReviews bounds the bodies over 128 KiB (no ordinary pod's
	// review is) held and decoded at once; 0 means 1, so such reviews,
	// whatever their number, take one core at most.
	MaxLargeReviews int
	// SlotWait is how long a review waits for one of those slots before
	// it is answered 503 (the API server then applies the failurePolicy);
	// 0 means 2s, well inside the API server's webhook timeout.
	SlotWait time.Duration
	// Policies says which pods an enforcing DNS policy selects; such a pod
	// is always injected and may not opt out or run as the agent's
	// identity (see Policies). Nil enforces nothing at admission.
	Policies Policies
	// CABundle returns the PEM CAs that verify the control plane's gRPC
	// certificate (selfcert.Manager.CABundle), or nil. When it returns
	// some, injected agents talk TLS to the control plane, trusting these
	// CAs, and present the pod's projected ServiceAccount token; without
	// it (or with the template's plaintext) they dial plaintext and present
	// nothing.
	CABundle func() []byte
	// CAConfigMaps, when set with CABundle, says which namespaces have
	// the ConfigMap with the bundle (made by its namespace watch, never at
	// admission), which the agents' identity volume then projects (the
	// kubelet refreshes it in running pods); nil, or a namespace without
	// it yet, projects the pod's annotation.
	CAConfigMaps *CAConfigMaps
	// Logger; nil means slog.Default().
	Logger *slog.Logger
	// Registerer for the metrics; nil registers nothing.
	Registerer prometheus.Registerer
}

// Webhook is the sidecar injector, an http.Handler. The server that
// serves it owns the listener and the TLS certificate (the control plane,
// with internal/certfile or controlplane/selfcert).
type Webhook struct {
	cfg     Config
	log     *slog.Logger
	metrics *metrics
	mux     *http.ServeMux
	limits  *limits

	base     Template                 // cfg.Template over DefaultTemplate
	template atomic.Pointer[Template] // current template, never nil

	tmu          sync.Mutex // guards lastTemplate
	lastTemplate []byte     // content of the template file in use
}

var _ http.Handler = (*Webhook)(nil)

// New validates cfg and returns a Webhook. It does no I/O: the template
// file is first read by WatchTemplate.
func New(cfg Config) (*Webhook, error) {
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 10 * time.Second
	}
	if cfg.MaxRequestBytes <= 0 {
		cfg.MaxRequestBytes = 4 << 20
	}
	if cfg.MaxConcurrentReviews <= 0 {
		cfg.MaxConcurrentReviews = 4
	}
	if cfg.MaxLargeReviews <= 0 {
		cfg.MaxLargeReviews = 1
	}
	if cfg.SlotWait <= 0 {
		cfg.SlotWait = 2 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	base := cfg.Template.over(DefaultTemplate())
	if err := base.validate(); err != nil {
		return nil, fmt.Errorf("webhook template: %w", err)
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("webhook metrics: %w", err)
	}
	w := &Webhook{
		cfg:     cfg,
		log:     cfg.Logger,
		metrics: m,
		base:    base,
		limits:  newLimits(cfg.MaxRequestBytes, cfg.MaxLargeReviews, cfg.MaxConcurrentReviews, cfg.SlotWait),
	}
	w.template.Store(&base)
	w.mux = http.NewServeMux()
	w.mux.Handle("/inject", w.handler(namespaceEnabled))
	w.mux.Handle("/inject/annotated", w.handler(annotationOnly))
	return w, nil
}

// ServeHTTP serves /inject (pods of namespaces that opted in) and
// /inject/annotated (pods of other namespaces, injected only on opt-in).
func (w *Webhook) ServeHTTP(rw http.ResponseWriter, r *http.Request) { w.mux.ServeHTTP(rw, r) }

// Template returns the template in use.
func (w *Webhook) Template() Template { return *w.template.Load() }

// WatchTemplate loads the template file and re-reads it whenever it
// changes, until ctx ends. A template file that cannot be loaded at the
// start is an error; later bad versions are logged, counted and skipped.
func (w *Webhook) WatchTemplate(ctx context.Context) error {
	if w.cfg.TemplateFile == "" {
		<-ctx.Done()
		return nil
	}
	if err := w.reloadTemplate(); err != nil {
		return fmt.Errorf("webhook: %w", err)
	}
	return filewatch.Run(ctx, filewatch.Config{
		Paths: []string{w.cfg.TemplateFile}, Interval: w.cfg.PollInterval, Changed: w.reloadTemplateLogged, Logger: w.log,
	})
}

func (w *Webhook) reloadTemplateLogged() {
	if err := w.reloadTemplate(); err != nil {
		w.metrics.reloads.WithLabelValues("error").Inc()
		w.log.Error("reload injection template", "err", err)
	}
}

// reloadTemplate re-reads the template file when it changed.
func (w *Webhook) reloadTemplate() error {
	if w.cfg.TemplateFile == "" {
		return nil
	}
	w.tmu.Lock()
	defer w.tmu.Unlock()
	t, data, err := loadTemplate(w.cfg.TemplateFile, w.base)
	if data != nil && bytes.Equal(data, w.lastTemplate) {
		return nil // unchanged, even if it is still the bad one
	}
	w.lastTemplate = data
	if err != nil {
		return err
	}
	w.template.Store(&t)
	w.metrics.reloads.WithLabelValues("ok").Inc()
	w.log.Info("loaded injection template", "file", w.cfg.TemplateFile, "image", t.Image)
	return nil
}
