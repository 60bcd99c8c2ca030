package agent

import (
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/meshdns/meshdns/internal/namewire"
	"github.com/meshdns/meshdns/pkg/proxy"
)

// The query log (and so the dnstap frames, which follow it) is set by four
// sources. The first three are the operator's, each overriding the fields
// it sets of those before it: the flags (the injection template's args),
// the control plane's settings, the pod's annotations. The annotation is
// the most specific standing choice (the workload's owner, on the pod
// itself); the settings speak for the cluster or namespace; the flags are
// the template's default. Together they are the floor. The fourth,
// /debug/querylog (and SetQueryLog), is whoever reaches the admin port,
// every process of the pod included, until DELETE /debug/querylog or a
// restart: it may only raise the floor (querylogfloor.go).

// queryLogPatch is one source's say: nil fields leave the field to the
// sources before it.
type queryLogPatch struct {
	Classes *proxy.QueryLogClass `json:"classes,omitempty"`
	Sample  *int                 `json:"sample,omitempty"`
	Rate    *int                 `json:"rate,omitempty"`
}

func (p queryLogPatch) apply(c proxy.QueryLogConfig) proxy.QueryLogConfig {
	if p.Classes != nil {
		c.Classes = *p.Classes
	}
	if p.Sample != nil {
		c.Sample = *p.Sample
	}
	if p.Rate != nil {
		c.Rate = *p.Rate
	}
	return c
}

// queryLogSources holds every source's say and sets the composition on
// the DNS server whenever one changes.
type queryLogSources struct {
	mu                          sync.Mutex // guards following
	flags                       proxy.QueryLogConfig
	settings, annotation, admin queryLogPatch
	// set receives each new composition (the DNS server's SetQueryLog);
	// nil before Listen.
	set func(proxy.QueryLogConfig)
}

// effectiveLocked composes the sources: the floor raised by the admin
// port's patch.
func (s *queryLogSources) effectiveLocked() proxy.QueryLogConfig {
	return raise(s.floorLocked(), s.admin)
}

// floorLocked composes the operator's sources.
func (s *queryLogSources) floorLocked() proxy.QueryLogConfig {
	c := s.flags
	for _, p := range []queryLogPatch{s.settings, s.annotation} {
		c = p.apply(c)
	}
	return c
}

// update lets f change the sources and sets the composition.
func (s *queryLogSources) update(f func(*queryLogSources)) proxy.QueryLogConfig {
	s.mu.Lock()
	defer s.mu.Unlock()
	before := s.effectiveLocked()
	f(s)
	c := s.effectiveLocked()
	s.setLocked(before, c)
	return c
}

// patchAdmin merges req into the admin port's patch, unless the result
// would lower the floor (a *floorError), and returns the log before and
// after.
func (s *queryLogSources) patchAdmin(req queryLogPatch) (from, to proxy.QueryLogConfig, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	admin := s.admin
	if req.Classes != nil {
		admin.Classes = req.Classes
	}
	if req.Sample != nil {
		admin.Sample = req.Sample
	}
	if req.Rate != nil {
		admin.Rate = req.Rate
	}
	floor, from := s.floorLocked(), s.effectiveLocked()
	to = raise(floor, admin)
	if err := checkRaise(floor, req, to); err != nil {
		return from, from, err
	}
	s.admin = admin
	s.setLocked(from, to)
	return from, to, nil
}

// resetAdmin drops the admin port's patch and returns the log before and
// after.
func (s *queryLogSources) resetAdmin() (from, to proxy.QueryLogConfig) {
	s.mu.Lock()
	defer s.mu.Unlock()
	from = s.effectiveLocked()
	s.admin = queryLogPatch{}
	to = s.effectiveLocked()
	s.setLocked(from, to)
	return from, to
}

// setLocked hands the composition to the server when it changed: setting
// an unchanged one again would restart the rate cap's second.
func (s *queryLogSources) setLocked(before, c proxy.QueryLogConfig) {
	if s.set != nil && c != before {
		s.set(c)
	}
}

func (s *queryLogSources) effective() proxy.QueryLogConfig {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.effectiveLocked()
}

// Annotations of the pod that set its query log (and dnstap), read from
// the downward API file of --pod-annotations.
const (
	AnnotationQueryLog       = "meshdns.io/query-log"
	AnnotationQueryLogSample = "meshdns.io/query-log-sample"
	AnnotationQueryLogRate   = "meshdns.io/query-log-rate"
)

// queryLogFromAnnotations reads the query log annotations; an invalid
// value is an error naming the annotation, and the caller keeps the last
// good patch.
func queryLogFromAnnotations(ann map[string]string) (queryLogPatch, error) {
	var p queryLogPatch
	if v, ok := ann[AnnotationQueryLog]; ok {
		c, err := proxy.ParseQueryLogClasses(strings.TrimSpace(v))
		if err != nil {
			return p, fmt.Errorf("annotation %s: %w", AnnotationQueryLog, err)
		}
		p.Classes = &c
	}
	for _, f := range []struct {
		key string
		dst **int
	}{{AnnotationQueryLogSample, &p.Sample}, {AnnotationQueryLogRate, &p.Rate}} {
		v, ok := ann[f.key]
		if !ok {
			continue
		}
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 0 {
			return queryLogPatch{}, fmt.Errorf("annotation %s: %q is not a number >= 0", f.key, v)
		}
		*f.dst = &n
	}
	return p, nil
}

// queryLogFromSettings reads the control plane's QueryLog: nil sets
// nothing (the control plane has no say); set, it gives the classes
// (none: off) and the sampling, and the rate unless 0 (the agent's).
func queryLogFromSettings(t *namewire.Telemetry) (queryLogPatch, error) {
	if t == nil || t.QueryLog == nil {
		return queryLogPatch{}, nil
	}
	q := t.QueryLog
	c, err := proxy.ParseQueryLogClasses(strings.Join(q.Classes, ","))
	if err != nil {
		return queryLogPatch{}, fmt.Errorf("telemetry.query_log: %w", err)
	}
	sample := int(q.SampleEvery)
	p := queryLogPatch{Classes: &c, Sample: &sample}
	if q.MaxPerSecond > 0 {
		rate := int(q.MaxPerSecond)
		p.Rate = &rate
	}
	return p, nil
}
