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
// sources, each overriding the fields it sets of those before it: the
// flags (the injection template's args), the control plane's settings,
// the pod's annotations, and /debug/querylog. The annotation is the most
// specific standing choice (the workload's owner, on the pod itself);
// the settings speak for the cluster or namespace; the flags are the
// template's default; the admin endpoint is an operator at this pod now,
// until DELETE /debug/querylog or a restart.

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

// effectiveLocked composes the sources.
func (s *queryLogSources) effectiveLocked() proxy.QueryLogConfig {
	c := s.flags
	for _, p := range []queryLogPatch{s.settings, s.annotation, s.admin} {
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
	// An unchanged composition is not set again: that would restart the
	// rate cap's second.
	if s.set != nil && c != before {
		s.set(c)
	}
	return c
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
