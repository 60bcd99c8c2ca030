package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Config configures a Webhook. The zero value of each field is documented.
type Config struct {
	// Addr is where Run serves HTTPS; "" means ":15017".
	Addr string
	// CertFile and KeyFile hold the PEM serving certificate and key. They
	// are required by Run and Serve and re-read whenever they change.
	CertFile, KeyFile string
	// Template is the default template, layered on DefaultTemplate.
	Template Template
	// TemplateFile is an optional YAML or JSON Template layered on
	// Template, re-read whenever it changes. "" means Template alone. A
	// file that does not parse keeps the last good template.
	TemplateFile string
	// FailClosed denies a pod the webhook cannot inject because of an
	// internal error. The default (false) admits the pod uninjected with a
	// warning, matching failurePolicy: Ignore: DNS interception is not
	// worth blocking a rollout.
	FailClosed bool
	// PollInterval is how often the files are re-read in case a change
	// event was missed; 0 means 10s.
	PollInterval time.Duration
	// MaxRequestBytes caps an AdmissionReview body; 0 means 4 MiB. The API
	// server limits objects to about 1.5 MiB; the cap guards against
	// anything else that can reach the port.
	MaxRequestBytes int64
	// Logger; nil means slog.Default().
	Logger *slog.Logger
	// Registerer for the metrics; nil registers nothing.
	Registerer prometheus.Registerer
}

// Webhook is the sidecar injector. It is an http.Handler (for tests and
// for mounting on another server) and runs its own HTTPS server with Run.
type Webhook struct {
	cfg     Config
	log     *slog.Logger
	metrics *metrics
	mux     *http.ServeMux
	certs   certReloader

	base     Template                 // cfg.Template over DefaultTemplate
	template atomic.Pointer[Template] // current template, never nil

	tmu          sync.Mutex // guards lastTemplate
	lastTemplate []byte     // content of the template file in use
}

var _ http.Handler = (*Webhook)(nil)

// New validates cfg and returns a Webhook. It does no I/O: the certificate
// and the template file are first read by Run or Serve.
func New(cfg Config) (*Webhook, error) {
	if cfg.Addr == "" {
		cfg.Addr = ":15017"
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 10 * time.Second
	}
	if cfg.MaxRequestBytes <= 0 {
		cfg.MaxRequestBytes = 4 << 20
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
		certs:   certReloader{certFile: cfg.CertFile, keyFile: cfg.KeyFile},
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

// Run listens on Config.Addr and serves until ctx ends.
func (w *Webhook) Run(ctx context.Context) error {
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", w.cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", w.cfg.Addr, err)
	}
	return w.Serve(ctx, ln)
}

// Serve serves HTTPS on ln until ctx ends, and closes ln. It fails at once
// when the certificate or the template file cannot be read, so a broken
// deployment shows in the pod status instead of in every admission.
func (w *Webhook) Serve(ctx context.Context, ln net.Listener) error {
	if w.cfg.CertFile == "" || w.cfg.KeyFile == "" {
		ln.Close()
		return errors.New("webhook: certificate and key files are required")
	}
	if _, err := w.certs.reload(); err != nil {
		ln.Close()
		return fmt.Errorf("webhook: %w", err)
	}
	if err := w.reloadTemplate(); err != nil {
		ln.Close()
		return fmt.Errorf("webhook: %w", err)
	}
	srv := &http.Server{
		Handler:           w,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       90 * time.Second,
		ErrorLog:          slog.NewLogLogger(w.log.Handler(), slog.LevelDebug),
		TLSConfig: &tls.Config{
			MinVersion:     tls.VersionTLS12,
			GetCertificate: w.certs.getCertificate,
		},
	}
	var wg sync.WaitGroup
	wctx, stop := context.WithCancel(ctx)
	defer func() { stop(); wg.Wait() }()
	wg.Add(2)
	go func() {
		defer wg.Done()
		watchFiles(wctx, w.log, w.watched(), w.cfg.PollInterval, w.reloadAll)
	}()
	go func() {
		defer wg.Done()
		<-wctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx) // Serve below returns ErrServerClosed
	}()
	w.log.Info("webhook serving", "addr", ln.Addr().String())
	err := srv.ServeTLS(ln, "", "")
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return fmt.Errorf("webhook serve: %w", err)
}

func (w *Webhook) watched() []string {
	files := []string{w.cfg.CertFile, w.cfg.KeyFile}
	if w.cfg.TemplateFile != "" {
		files = append(files, w.cfg.TemplateFile)
	}
	return files
}

// WatchTemplate loads the template file and re-reads it whenever it
// changes, until ctx ends. It is for servers that serve the Webhook as an
// http.Handler with their own TLS (the control plane's webhook listener);
// Serve does the same by itself. A template file that cannot be loaded at
// the start is an error; later bad versions are logged and skipped.
func (w *Webhook) WatchTemplate(ctx context.Context) error {
	if w.cfg.TemplateFile == "" {
		<-ctx.Done()
		return nil
	}
	if err := w.reloadTemplate(); err != nil {
		return fmt.Errorf("webhook: %w", err)
	}
	watchFiles(ctx, w.log, []string{w.cfg.TemplateFile}, w.cfg.PollInterval, w.reloadTemplateLogged)
	return nil
}

// reloadAll re-reads every file; errors are logged and counted, and the
// last good certificate and template stay in use.
func (w *Webhook) reloadAll() {
	if changed, err := w.certs.reload(); err != nil {
		w.metrics.reloads.WithLabelValues("certificate", "error").Inc()
		w.log.Error("reload serving certificate", "err", err)
	} else if changed {
		w.metrics.reloads.WithLabelValues("certificate", "ok").Inc()
		w.log.Info("reloaded serving certificate", "file", w.cfg.CertFile)
	}
	w.reloadTemplateLogged()
}

func (w *Webhook) reloadTemplateLogged() {
	if err := w.reloadTemplate(); err != nil {
		w.metrics.reloads.WithLabelValues("template", "error").Inc()
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
	w.metrics.reloads.WithLabelValues("template", "ok").Inc()
	w.log.Info("loaded injection template", "file", w.cfg.TemplateFile, "image", t.Image)
	return nil
}
