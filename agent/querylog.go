package agent

import (
	"errors"
	"log/slog"
	"net/http"
	"os"
	"strconv"

	"github.com/meshdns/meshdns/pkg/proxy"
)

// SetQueryLog switches the query log while serving: the hook for
// /debug/querylog and for settings pushed by the control plane. Before
// Listen there is no server: Config.QueryLog is the first setting.
func (a *Agent) SetQueryLog(cfg proxy.QueryLogConfig) error {
	if a.server == nil {
		return errors.New("agent: set query log before Listen")
	}
	a.server.SetQueryLog(cfg)
	return nil
}

// handleQueryLog shows (GET) or changes (PUT/POST ?classes=nxdomain,servfail
// &sample=N&rate=N; a parameter left out keeps its value) the query log.
func (a *Agent) handleQueryLog(w http.ResponseWriter, r *http.Request) {
	cfg := a.server.QueryLog()
	switch r.Method {
	case http.MethodGet:
	case http.MethodPut, http.MethodPost:
		q := r.URL.Query()
		if q.Has("classes") {
			c, err := proxy.ParseQueryLogClasses(q.Get("classes"))
			if err != nil {
				http.Error(w, "classes: "+err.Error(), http.StatusBadRequest)
				return
			}
			cfg.Classes = c
		}
		for _, p := range []struct {
			name string
			v    *int
		}{{"sample", &cfg.Sample}, {"rate", &cfg.Rate}} {
			if !q.Has(p.name) {
				continue
			}
			n, err := strconv.Atoi(q.Get(p.name))
			if err != nil || n < 0 {
				http.Error(w, p.name+": want a number >= 0", http.StatusBadRequest)
				return
			}
			*p.v = n
		}
		if err := a.SetQueryLog(cfg); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
	default:
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	writeJSON(w, cfg)
}

// queryLogger writes JSON lines naming the pod, whatever the format and
// level of the agent's own logs, so a collector can parse them alone.
func queryLogger(cfg Config) *slog.Logger {
	if cfg.QueryLogNoLines {
		return slog.New(slog.DiscardHandler)
	}
	w := cfg.QueryLogOutput
	if w == nil {
		w = os.Stderr
	}
	return slog.New(slog.NewJSONHandler(w, nil)).With("namespace", cfg.Namespace, "pod", cfg.PodName, "instance_id", cfg.InstanceID)
}
