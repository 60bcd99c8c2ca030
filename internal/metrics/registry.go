package metrics

import (
	"bufio"
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
)

// ErrDuplicate is returned when a family name is registered twice.
var ErrDuplicate = errors.New("metric already registered")

// Registry holds collectors and writes their samples. Inject one per
// program (and one per test, so tests run in parallel).
type Registry struct {
	mu         sync.Mutex // guards following
	collectors []Collector
	descs      map[string]Desc // by family name
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{descs: map[string]Desc{}} }

// Register adds c; it fails, adding nothing, when one of c's families is
// registered already.
func (r *Registry) Register(c Collector) error {
	ds := c.Describe()
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, d := range ds {
		if _, ok := r.descs[d.Name]; ok || slices.ContainsFunc(ds[:i], func(o Desc) bool { return o.Name == d.Name }) {
			return fmt.Errorf("register %s: %w", d.Name, ErrDuplicate)
		}
	}
	for _, d := range ds {
		r.descs[d.Name] = d
	}
	r.collectors = append(r.collectors, c)
	return nil
}

// MustRegister registers cs and panics on a duplicate: for main, where
// the set of metrics is fixed.
func (r *Registry) MustRegister(cs ...Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// Registerer is a registry RegisterAll registers with: a *Registry, or
// the control plane's prometheus.Registerer.
type Registerer[C any] interface {
	Register(C) error
	Unregister(C) bool
}

// RegisterAll registers a package's metrics, cs, as one set: when one
// fails, those registered before it are unregistered, so a package that
// cannot start leaves nothing behind; the error names what (the package).
// Every package's newMetrics ends with it, whichever registry it has.
func RegisterAll[C any](reg Registerer[C], what string, cs []C) error {
	for i, c := range cs {
		if err := reg.Register(c); err != nil {
			for _, done := range cs[:i] {
				reg.Unregister(done)
			}
			return fmt.Errorf("register %s metrics: %w", what, err)
		}
	}
	return nil
}

// Unregister removes c and reports whether it was registered.
func (r *Registry) Unregister(c Collector) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	i := slices.Index(r.collectors, c)
	if i < 0 {
		return false
	}
	r.collectors = slices.Delete(r.collectors, i, i+1)
	for _, d := range c.Describe() {
		delete(r.descs, d.Name)
	}
	return true
}

// Names returns the registered family names, sorted (the README checks
// compare them with what the package documents).
func (r *Registry) Names() []string {
	var names []string
	for _, d := range r.Descs() {
		names = append(names, d.Name)
	}
	return names
}

// Descs returns the registered families, sorted by name.
func (r *Registry) Descs() []Desc {
	r.mu.Lock()
	defer r.mu.Unlock()
	ds := make([]Desc, 0, len(r.descs))
	for _, d := range r.descs {
		ds = append(ds, d)
	}
	slices.SortFunc(ds, func(a, b Desc) int { return cmp.Compare(a.Name, b.Name) })
	return ds
}

// WriteText writes every family that has samples in the text format
// 0.0.4: families sorted by name, each with its HELP and TYPE lines, its
// series sorted by label values. A family without series (a vector none
// of whose label values was used yet) is left out, as in client_golang.
func (r *Registry) WriteText(out io.Writer) error {
	r.mu.Lock()
	cs := slices.Clone(r.collectors)
	descs := make(map[string]Desc, len(r.descs))
	for n, d := range r.descs {
		descs[n] = d
	}
	r.mu.Unlock()

	var w Writer
	for _, c := range cs {
		c.Collect(&w)
	}
	names := make([]string, 0, len(w.families))
	for n := range w.families {
		if _, ok := descs[n]; !ok {
			return fmt.Errorf("write metrics: %s collected but not described", n)
		}
		names = append(names, n)
	}
	slices.Sort(names)
	bw := bufio.NewWriter(out)
	for _, n := range names {
		d := descs[n]
		bw.WriteString("# HELP " + n + " ")
		bw.Write(appendEscaped(nil, d.Help, false))
		bw.WriteString("\n# TYPE " + n + " " + d.Type.String() + "\n")
		ss := w.families[n]
		slices.SortStableFunc(ss, func(a, b series) int { return cmp.Compare(a.key, b.key) })
		for _, s := range ss {
			bw.Write(s.text)
		}
	}
	return bw.Flush()
}

// ContentType is the text format's media type.
const ContentType = "text/plain; version=0.0.4; charset=utf-8"

// Handler serves the registry's metrics (GET /metrics).
func (r *Registry) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		var b bytes.Buffer
		if err := r.WriteText(&b); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", ContentType)
		// A failed write means the scraper went away; nothing to tell it.
		_, _ = w.Write(b.Bytes())
	})
}
