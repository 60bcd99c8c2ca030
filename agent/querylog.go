package agent

import (
	"errors"
	"log/slog"
	"net/http"
	"os"
	"strconv"

	"github.com/meshdns/meshdns/pkg/proxy"
)

// SetQueryLog overrides the query log while serving, above every other
// source (flags, settings, annotations) until ResetQueryLog: the hook of
// /debug/querylog. Before Listen there is no server: Config.QueryLog is
// the first setting.
func (a *Agent) SetQueryLog(cfg proxy.QueryLogConfig) error {
	return a.patchQueryLog(queryLogPatch{Classes: &cfg.Classes, Sample: &cfg.Sample, Rate: &cfg.Rate})
}

// ResetQueryLog drops the override of SetQueryLog and /debug/querylog.
func (a *Agent) ResetQueryLog() error {
	if a.server == nil {
		return errors.New("agent: reset query log before Listen")
	}
	a.qlSources.update(func(s *queryLogSources) { s.admin = queryLogPatch{} })
	return nil
}

func (a *Agent) patchQueryLog(p queryLogPatch) error {
	if a.server == nil {
		return errors.New("agent: set query log before Listen")
	}
	a.qlSources.update(func(s *queryLogSources) {
		for _, f := range []struct{ src, dst **int }{{&p.Sample, &s.admin.Sample}, {&p.Rate, &s.admin.Rate}} {
			if *f.src != nil {
				*f.dst = *f.src
			}
		}
		if p.Classes != nil {
			s.admin.Classes = p.Classes
		}
	})
	return nil
}

// handleQueryLog shows (GET) or overrides (PUT/POST ?classes=nxdomain,
// servfail&sample=N&rate=N; a parameter left out keeps its value) the
// query log; DELETE drops the override, back to what the flags, settings
// and annotations say.
func (a *Agent) handleQueryLog(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet:
	case http.MethodPut, http.MethodPost:
		q := r.URL.Query()
		var p queryLogPatch
		if q.Has("classes") {
			c, err := proxy.ParseQueryLogClasses(q.Get("classes"))
			if err != nil {
				http.Error(w, "classes: "+err.Error(), http.StatusBadRequest)
				return
			}
			p.Classes = &c
		}
		for _, f := range []struct {
			name string
			v    **int
		}{{"sample", &p.Sample}, {"rate", &p.Rate}} {
			if !q.Has(f.name) {
				continue
			}
			n, err := strconv.Atoi(q.Get(f.name))
			if err != nil || n < 0 {
				http.Error(w, f.name+": want a number >= 0", http.StatusBadRequest)
				return
			}
			*f.v = &n
		}
		if err := a.patchQueryLog(p); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
	case http.MethodDelete:
		if err := a.ResetQueryLog(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
	default:
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	writeJSON(w, a.server.QueryLog())
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
