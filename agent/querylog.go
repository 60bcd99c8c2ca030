package agent

import (
	"errors"
	"log/slog"
	"net/http"
	"os"
	"strconv"

	"github.com/meshdns/meshdns/internal/adminhttp"
	"github.com/meshdns/meshdns/pkg/proxy"
)

// errBeforeListen is a query log change before there is a server.
var errBeforeListen = errors.New("agent: query log changed before Listen")

// SetQueryLog raises the query log while serving, as PUT /debug/querylog
// does, until ResetQueryLog: it may add to what the flags, settings and
// annotations set (the floor), never remove from it; an error says what
// is protected. Before Listen there is no server: Config.QueryLog is the
// first setting.
func (a *Agent) SetQueryLog(cfg proxy.QueryLogConfig) error {
	return a.patchQueryLog(queryLogPatch{Classes: &cfg.Classes, Sample: &cfg.Sample, Rate: &cfg.Rate}, "SetQueryLog")
}

// ResetQueryLog drops what SetQueryLog and /debug/querylog added: back to
// the floor.
func (a *Agent) ResetQueryLog() error {
	return a.resetQueryLog("ResetQueryLog")
}

func (a *Agent) resetQueryLog(by string) error {
	if a.run.server == nil {
		return errBeforeListen
	}
	from, to := a.qlSources.resetAdmin()
	a.logQueryLogChange(by, from, to)
	return nil
}

func (a *Agent) patchQueryLog(p queryLogPatch, by string) error {
	if a.run.server == nil {
		return errBeforeListen
	}
	from, to, err := a.qlSources.patchAdmin(p)
	if err != nil {
		return err
	}
	a.logQueryLogChange(by, from, to)
	return nil
}

// logQueryLogChange writes the Info line of an accepted runtime change:
// the audit of who raised the log, and to what.
func (a *Agent) logQueryLogChange(by string, from, to proxy.QueryLogConfig) {
	a.log.Info("query log changed at runtime", "by", by, "from", queryLogAttrs(from), "to", queryLogAttrs(to))
}

func queryLogAttrs(c proxy.QueryLogConfig) slog.Value {
	return slog.GroupValue(slog.String("classes", c.Classes.String()), slog.Int("sample", c.Sample), slog.Int("rate", c.Rate))
}

// handleQueryLog shows (GET) or raises (PUT ?classes=nxdomain,servfail
// &sample=N&rate=N, or the same as a JSON body; a parameter left out
// keeps its value) the query log; DELETE drops what PUT added, back to
// what the flags, settings and annotations say. A PUT that would lower
// that floor gets 403 naming what is protected.
func (a *Agent) handleQueryLog(w http.ResponseWriter, r *http.Request) {
	var err error
	switch r.Method {
	case http.MethodPut:
		var p queryLogPatch
		if p, err = parseQueryLogRequest(r); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		err = a.patchQueryLog(p, "PUT /debug/querylog")
	case http.MethodDelete:
		err = a.resetQueryLog("DELETE /debug/querylog")
	}
	var fe *floorError
	switch {
	case errors.As(err, &fe):
		http.Error(w, err.Error(), http.StatusForbidden)
		return
	case err != nil:
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	adminhttp.WriteJSON(w, a.run.server.QueryLog())
}

// parseQueryLogRequest reads a PUT's classes, sample and rate, from the
// query string or a JSON body.
func parseQueryLogRequest(r *http.Request) (queryLogPatch, error) {
	var p queryLogPatch
	q, err := adminhttp.Params(r, "classes", "sample", "rate")
	if err != nil {
		return p, err
	}
	if q.Has("classes") {
		c, err := proxy.ParseQueryLogClasses(q.Get("classes"))
		if err != nil {
			return p, errors.New("classes: " + err.Error())
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
			return p, errors.New(f.name + ": want a number >= 0")
		}
		*f.v = &n
	}
	return p, nil
}

// queryLogger writes JSON lines naming the pod, whatever the format and
// level of the agent's own logs, so a collector can parse them alone, and
// /debug/loglevel cannot silence a denial's line.
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
