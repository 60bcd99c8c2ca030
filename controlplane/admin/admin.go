// Package admin is the control plane's admin HTTP handler: metrics,
// readiness and the debug views of agents and their tables, behind the
// guard the agent's admin port uses too (internal/adminhttp).
package admin

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/meshdns/meshdns/controlplane/server"
	"github.com/meshdns/meshdns/controlplane/view"
	"github.com/meshdns/meshdns/internal/adminhttp"
)

// Agents is what the handler needs from the gRPC server.
type Agents interface {
	Agents() []server.AgentInfo
	// AgentView returns the view of a connected agent, or nil.
	AgentView(namespace, pod string) *view.View
	// Quarantine lists the tables agents reported crashing on.
	Quarantine() []server.QuarantineInfo
}

// Config configures the handler.
type Config struct {
	// Gatherer serves /metrics; required.
	Gatherer prometheus.Gatherer
	// Agents lists agents; required.
	Agents Agents
	// Views serves /debug/nametable?namespace=; required.
	Views *view.Store
	// Ready reports readiness (the first version is built); nil means
	// always ready.
	Ready func() bool
	// Level, when set, is shown and changed by /debug/loglevel; nil: a
	// fixed level (501). Unlike the agent's, it has no floor: only the
	// control plane's own pod reaches this port, no workload.
	Level *slog.LevelVar
	// Logger receives an Info line per accepted change; nil: none.
	Logger *slog.Logger
}

// New returns the handler: reads by GET, the log level changed by PUT,
// and only for requests adminhttp.Guard lets through (a loopback Host,
// no cross-site browser request).
func New(cfg Config) (http.Handler, error) {
	if cfg.Gatherer == nil || cfg.Agents == nil || cfg.Views == nil {
		return nil, errors.New("admin: Gatherer, Agents and Views are required")
	}
	h := &handler{cfg: cfg}
	mux := http.NewServeMux()
	h.probes(mux)
	mux.HandleFunc("GET /debug/agents", h.agents)
	mux.HandleFunc("GET /debug/nametable", h.nametable)
	mux.HandleFunc("GET /debug/failing", h.failing)
	mux.HandleFunc("GET /debug/quarantine", h.quarantine)
	adminhttp.LogLevel{Var: cfg.Level, Logger: cfg.Logger}.Register(mux)
	adminhttp.Pprof(mux)
	return adminhttp.Guard(mux), nil
}

// NewProbes returns the handler of the probe port: readiness, liveness
// and /metrics, nothing that reveals a name or changes state, so it may
// listen on the pod network for the kubelet and Prometheus while New's
// handler (agents, pods, peer addresses, every namespace's table, log
// level, profiles) stays on loopback.
func NewProbes(cfg Config) (http.Handler, error) {
	if cfg.Gatherer == nil {
		return nil, errors.New("admin: Gatherer is required")
	}
	h := &handler{cfg: cfg}
	mux := http.NewServeMux()
	h.probes(mux)
	return mux, nil
}

type handler struct{ cfg Config }

func (h *handler) probes(mux *http.ServeMux) {
	mux.Handle("GET /metrics", promhttp.HandlerFor(h.cfg.Gatherer, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz/ready", h.ready)
	mux.HandleFunc("GET /healthz/live", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
}

func (h *handler) ready(w http.ResponseWriter, _ *http.Request) {
	if h.cfg.Ready != nil && !h.cfg.Ready() {
		http.Error(w, "no name table version yet", http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ok")
}

func (h *handler) agents(w http.ResponseWriter, _ *http.Request) {
	adminhttp.WriteJSON(w, h.cfg.Agents.Agents())
}

func (h *handler) quarantine(w http.ResponseWriter, _ *http.Request) {
	adminhttp.WriteJSON(w, h.cfg.Agents.Quarantine())
}

// nametable serves ?agent=<namespace>/<pod> (that agent's current view) or
// ?namespace=<ns>[&clusterDomain=<d>] (a view agents of that namespace use).
func (h *handler) nametable(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var v *view.View
	switch {
	case q.Get("agent") != "":
		ns, pod, ok := strings.Cut(q.Get("agent"), "/")
		if !ok || ns == "" || pod == "" {
			http.Error(w, "agent must be <namespace>/<pod>", http.StatusBadRequest)
			return
		}
		if v = h.cfg.Agents.AgentView(ns, pod); v == nil {
			http.Error(w, "agent "+q.Get("agent")+" is not connected", http.StatusNotFound)
			return
		}
	case q.Get("namespace") != "":
		key := view.Key{Namespace: q.Get("namespace"), ClusterDomain: q.Get("clusterDomain")}
		if v = h.cfg.Views.Lookup(key); v == nil {
			http.Error(w, "no agent of namespace "+key.Namespace+" is connected", http.StatusNotFound)
			return
		}
	default:
		http.Error(w, "give agent=<namespace>/<pod> or namespace=<ns>", http.StatusBadRequest)
		return
	}
	cur := v.Current()
	table, err := protojson.MarshalOptions{Indent: "  "}.Marshal(cur.Table())
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	adminhttp.WriteJSON(w, struct {
		Namespace     string          `json:"namespace"`
		ClusterDomain string          `json:"clusterDomain"`
		Version       string          `json:"version"`
		Seq           uint64          `json:"seq"`
		Table         json.RawMessage `json:"table"`
	}{v.Key().Namespace, v.Key().ClusterDomain, cur.ID, cur.Seq, table})
}
