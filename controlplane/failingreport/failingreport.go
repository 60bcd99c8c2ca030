// Package failingreport is the part of the per-agent settings
// (agentsettings.Part) that turns the agents' failing-names report on:
// for every agent, or for the agents of namespaces that opt in with a
// label, read through a narrow watch (namespace metadata, only the
// namespaces that carry the label).
package failingreport

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	"github.com/meshdns/meshdns/controlplane/agentsettings"
	"github.com/meshdns/meshdns/controlplane/auth"
	"github.com/meshdns/meshdns/controlplane/internal/deps"
	"github.com/meshdns/meshdns/controlplane/internal/metawatch"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// The namespace label that opts a namespace's pods in, and its value.
const (
	Label   = "meshdns.io/failing-report"
	Enabled = "enabled"
)

// Mode says which agents report.
type Mode string

// The modes.
const (
	// Off: no agent reports (the default).
	Off Mode = "off"
	// Namespaces: the agents of namespaces labelled Label=Enabled.
	Namespaces Mode = "namespaces"
	// All: every agent.
	All Mode = "all"
)

// ParseMode reads a mode; "" is Off.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case "":
		return Off, nil
	case Off, Namespaces, All:
		return m, nil
	}
	return "", fmt.Errorf("failing report %q: want off, namespaces or all", s)
}

// Config configures a Part. Zero fields take the default named beside
// them.
type Config struct {
	// Mode; Off.
	Mode Mode
	// TopN is the names an agent reports per window; 0 leaves the agent's
	// default (10; agents cut it to 50).
	TopN uint32
	// Window is the time between an agent's reports, in whole seconds; 0
	// leaves the agent's default (60s; agents clamp it to 5s..1h).
	Window time.Duration
	// Kube is the REST config of the namespace watch; required with
	// Namespaces.
	Kube *rest.Config
	// Logger; slog.Default().
	Logger *slog.Logger
}

// Part fills Telemetry.failing_report. Safe for concurrent use.
type Part struct {
	cfg  Config
	log  *slog.Logger
	meta metadata.Interface // or nil unless Namespaces
	agentsettings.Notifier

	mu sync.RWMutex        // guards following
	ns map[string]struct{} // namespaces opted in (Namespaces)
}

var _ agentsettings.Part = (*Part)(nil)

// New checks cfg and returns a Part; it does no I/O. With Namespaces, Run
// must run for any namespace to opt in.
func New(cfg Config) (*Part, error) {
	if cfg.Mode == "" {
		cfg.Mode = Off
	}
	if _, err := ParseMode(string(cfg.Mode)); err != nil {
		return nil, err
	}
	if cfg.Window < 0 || cfg.Window%time.Second != 0 {
		return nil, fmt.Errorf("failing report window %s: want whole seconds", cfg.Window)
	}
	p := &Part{cfg: cfg, log: deps.Logger(cfg.Logger), ns: map[string]struct{}{}}
	if cfg.Mode == Namespaces {
		if cfg.Kube == nil {
			return nil, errors.New("failing report: namespaces mode needs a Kubernetes config")
		}
		var err error
		if p.meta, err = metadata.NewForConfig(cfg.Kube); err != nil {
			return nil, fmt.Errorf("failing report: %w", err)
		}
	}
	return p, nil
}

// Fill turns the report on for the agent id when its namespace opted in
// (or every agent does), keeping the telemetry other parts set.
func (p *Part) Fill(id auth.Identity, s *meshdnsv1.AgentSettings) {
	switch p.cfg.Mode {
	case All:
	case Namespaces:
		p.mu.RLock()
		_, ok := p.ns[id.Namespace]
		p.mu.RUnlock()
		if !ok {
			return
		}
	default:
		return
	}
	if s.Telemetry == nil {
		s.Telemetry = &meshdnsv1.Telemetry{}
	}
	s.Telemetry.FailingReport = &meshdnsv1.FailingReport{Enabled: true, TopN: p.cfg.TopN,
		WindowSeconds: uint32(p.cfg.Window / time.Second)}
}

// OptedIn lists the namespaces opted in, for tests and logs.
func (p *Part) OptedIn() []string {
	p.mu.RLock()
	defer p.mu.RUnlock()
	out := make([]string, 0, len(p.ns))
	for ns := range p.ns {
		out = append(out, ns)
	}
	return out
}

// setNamespace records whether namespace ns is opted in, announcing a
// change.
func (p *Part) setNamespace(ns string, in bool) {
	p.mu.Lock()
	_, was := p.ns[ns]
	if in {
		p.ns[ns] = struct{}{}
	} else {
		delete(p.ns, ns)
	}
	p.mu.Unlock()
	if was != in {
		p.log.Info("failing report", "namespace", ns, "opted_in", in)
		p.Notify()
	}
}

var namespacesResource = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}

// Run watches the namespaces that opt in until ctx ends (Namespaces);
// other modes return at once. The watch asks for metadata only, and only
// for namespaces labelled Label=Enabled: removing the label, or changing
// its value, is a deletion for the watch.
func (p *Part) Run(ctx context.Context) error {
	if p.cfg.Mode != Namespaces {
		return nil
	}
	lw := metawatch.ListWatch(ctx, p.meta, namespacesResource, "", Label+"="+Enabled)
	return metawatch.Watch{ListWatch: lw, Keep: metawatch.Label(Label), On: func(m *metav1.PartialObjectMetadata, gone bool) {
		p.setNamespace(m.Name, !gone && m.Labels[Label] == Enabled)
	}}.Run(ctx)
}
