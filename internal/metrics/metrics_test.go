package metrics

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func text(t *testing.T, r *Registry) string {
	t.Helper()
	var b strings.Builder
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestWriteText(t *testing.T) {
	r := NewRegistry()
	c := NewCounter(Opts{Name: "x_requests_total", Help: "Requests.\nSecond line with a \\ backslash."})
	cv := NewCounterVec(Opts{Name: "x_errors_total", Help: "Errors by kind."}, []string{"upstream", "kind"})
	empty := NewCounterVec(Opts{Name: "x_unused_total", Help: "Never used."}, []string{"kind"})
	g := NewGauge(Opts{Name: "x_inflight", Help: "In flight."})
	gf := NewConstLabelGaugeFunc(Opts{Name: "x_build_info", Help: "Always 1."}, []string{"version", "goversion"}, []string{"v1", "go1"}, func() float64 { return 1 })
	h := NewHistogram(HistogramOpts{Name: "x_duration_seconds", Help: "Duration.", Buckets: []float64{0.001, 0.01, 1}})
	r.MustRegister(c, cv, empty, g, gf, h)

	c.Inc()
	c.Add(2)
	cv.WithLabelValues("10.0.0.1:53", "timeout").Inc()
	cv.WithLabelValues(`a"b\c`+"\nd", "network").Add(0.5)
	g.Set(3)
	g.Dec()
	for _, v := range []float64{0.0005, 0.001, 0.5, 7} {
		h.Observe(v)
	}

	want := `# HELP x_build_info Always 1.
# TYPE x_build_info gauge
x_build_info{goversion="go1",version="v1"} 1
# HELP x_duration_seconds Duration.
# TYPE x_duration_seconds histogram
x_duration_seconds_bucket{le="0.001"} 2
x_duration_seconds_bucket{le="0.01"} 2
x_duration_seconds_bucket{le="1"} 3
x_duration_seconds_bucket{le="+Inf"} 4
x_duration_seconds_sum 7.5015
x_duration_seconds_count 4
# HELP x_errors_total Errors by kind.
# TYPE x_errors_total counter
x_errors_total{kind="network",upstream="a\"b\\c\nd"} 0.5
x_errors_total{kind="timeout",upstream="10.0.0.1:53"} 1
# HELP x_inflight In flight.
# TYPE x_inflight gauge
x_inflight 2
# HELP x_requests_total Requests.\nSecond line with a \\ backslash.
# TYPE x_requests_total counter
x_requests_total 3
`
	if diff := cmp.Diff(want, text(t, r)); diff != "" {
		t.Errorf("(-want +got)\n%s", diff)
	}
	if diff := cmp.Diff([]string{"x_build_info", "x_duration_seconds", "x_errors_total", "x_inflight", "x_requests_total", "x_unused_total"}, r.Names()); diff != "" {
		t.Errorf("Names (-want +got)\n%s", diff)
	}
}

func TestRegisterDuplicate(t *testing.T) {
	r := NewRegistry()
	a := NewGauge(Opts{Name: "x_a", Help: "A."})
	if err := r.Register(a); err != nil {
		t.Fatal(err)
	}
	if err := r.Register(NewCounter(Opts{Name: "x_a", Help: "Again."})); !errors.Is(err, ErrDuplicate) {
		t.Errorf("second x_a: %v, want ErrDuplicate", err)
	}
	if !r.Unregister(a) || r.Unregister(a) {
		t.Error("Unregister: want true once, then false")
	}
	if err := r.Register(NewCounter(Opts{Name: "x_a", Help: "Again."})); err != nil {
		t.Errorf("x_a after Unregister: %v", err)
	}
}

// A set of metrics is registered whole or not at all.
func TestRegisterAll(t *testing.T) {
	r := NewRegistry()
	if err := r.Register(NewGauge(Opts{Name: "x_b", Help: "B."})); err != nil {
		t.Fatal(err)
	}
	set := []Collector{NewGauge(Opts{Name: "x_a", Help: "A."}), NewCounter(Opts{Name: "x_b", Help: "Again."})}
	if err := RegisterAll(r, "test", set); !errors.Is(err, ErrDuplicate) || !strings.Contains(err.Error(), "register test metrics") {
		t.Errorf("RegisterAll with x_b twice: %v, want ErrDuplicate naming the set", err)
	}
	if got := r.Names(); !slices.Equal(got, []string{"x_b"}) {
		t.Errorf("after a failed RegisterAll: %v registered, want only x_b", got)
	}
	if err := RegisterAll(r, "test", set[:1]); err != nil {
		t.Errorf("RegisterAll of x_a alone: %v", err)
	}
}

func TestInvalidNamesPanic(t *testing.T) {
	for _, tt := range []struct {
		name string
		f    func()
	}{
		{name: "metric name", f: func() { NewCounter(Opts{Name: "x-y"}) }},
		{name: "metric name starting with a digit", f: func() { NewCounter(Opts{Name: "1x"}) }},
		{name: "empty metric name", f: func() { NewCounter(Opts{}) }},
		{name: "colon in a label name", f: func() { NewCounterVec(Opts{Name: "x:y"}, []string{"a:b"}) }},
		{name: "label name", f: func() { NewCounterVec(Opts{Name: "x"}, []string{"a b"}) }},
		{name: "reserved label", f: func() { NewHistogramVec(HistogramOpts{Name: "x", Buckets: []float64{1}}, []string{"le"}) }},
		{name: "unsorted buckets", f: func() { NewHistogram(HistogramOpts{Name: "x", Buckets: []float64{2, 1}}) }},
		{name: "label values", f: func() { NewCounterVec(Opts{Name: "x"}, []string{"a"}).WithLabelValues("1", "2") }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("no panic")
				}
			}()
			tt.f()
		})
	}
}

func TestValidNames(t *testing.T) {
	for _, n := range []string{"meshdns_dns_requests_total", "x:y", "_x", "A9"} {
		if !validName(n, true) {
			t.Errorf("metric name %q refused", n)
		}
	}
	if validName("x:y", false) || !validName("upstream", false) {
		t.Error("label names: want colons refused, letters taken")
	}
}

func TestGaugeVecReset(t *testing.T) {
	r := NewRegistry()
	v := NewGaugeVec(Opts{Name: "x_info", Help: "Info."}, []string{"version"})
	r.MustRegister(v)
	v.WithLabelValues("a").Set(1)
	v.Reset()
	v.WithLabelValues("b").Set(1)
	if got := text(t, r); !strings.Contains(got, `x_info{version="b"} 1`) || strings.Contains(got, `version="a"`) {
		t.Errorf("after Reset:\n%s", got)
	}
	v.WithLabelValues("c").Set(1)
	if !v.DeleteLabelValues("b") || v.DeleteLabelValues("b") {
		t.Error("DeleteLabelValues: want true once, then false")
	}
	if got := text(t, r); strings.Contains(got, `version="b"`) || !strings.Contains(got, `x_info{version="c"} 1`) {
		t.Errorf("after DeleteLabelValues:\n%s", got)
	}
}

// TestConcurrentUpdates counts from many goroutines while scraping: the
// race detector checks the scrape, the total checks no increment is lost.
func TestConcurrentUpdates(t *testing.T) {
	r := NewRegistry()
	c := NewCounter(Opts{Name: "x_total", Help: "X."})
	h := NewHistogram(HistogramOpts{Name: "x_seconds", Help: "X.", Buckets: []float64{0.001, 0.002, 0.004, 0.008}})
	r.MustRegister(c, h)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for i := range 1000 {
				c.Inc()
				h.Observe(float64(i) / 1000)
			}
		})
	}
	wg.Go(func() {
		for range 20 {
			if err := r.WriteText(io.Discard); err != nil {
				t.Error(err)
			}
		}
	})
	wg.Wait()
	if c.Value() != 4000 || h.Count() != 4000 {
		t.Errorf("counter %v, histogram count %v, want 4000 each", c.Value(), h.Count())
	}
}

func TestHotPathAllocs(t *testing.T) {
	c := NewCounterVec(Opts{Name: "x_total", Help: "X."}, []string{"a"}).WithLabelValues("1")
	g := NewGauge(Opts{Name: "x", Help: "X."})
	h := NewHistogram(HistogramOpts{Name: "x_seconds", Help: "X.", Buckets: pow4(1e-5, 10)})
	if n := testing.AllocsPerRun(100, func() { c.Inc(); g.Inc(); g.Dec(); h.Observe(0.002) }); n != 0 {
		t.Errorf("%v allocations per update, want 0", n)
	}
}

func TestHandler(t *testing.T) {
	r := NewRegistry()
	r.MustRegister(NewGaugeFunc(Opts{Name: "x_up", Help: "Up."}, func() float64 { return 1 }))
	rec := httptest.NewRecorder()
	r.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != ContentType || !strings.Contains(rec.Body.String(), "\nx_up 1\n") {
		t.Errorf("%d %q\n%s", rec.Code, rec.Header().Get("Content-Type"), rec.Body)
	}
}

// TestRuntimeCollectors checks that the Go and process families are
// written with values that can be true of this process.
func TestRuntimeCollectors(t *testing.T) {
	r := NewRegistry()
	r.MustRegister(GoCollector{}, ProcessCollector{})
	got := map[string]float64{}
	for line := range strings.SplitSeq(text(t, r), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, v, _ := strings.Cut(line, " ")
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		got[name] = f
	}
	for _, tt := range []struct {
		name string
		ok   func(float64) bool
	}{
		{name: "go_goroutines", ok: func(v float64) bool { return v >= 1 }},
		{name: "go_memstats_heap_alloc_bytes", ok: func(v float64) bool { return v > 0 }},
		{name: "go_memstats_sys_bytes", ok: func(v float64) bool { return v > 1<<20 }},
		{name: "go_sched_gomaxprocs_threads", ok: func(v float64) bool { return v >= 1 }},
		{name: `go_gc_duration_seconds{quantile="1"}`, ok: func(v float64) bool { return v >= 0 }},
		{name: "process_resident_memory_bytes", ok: func(v float64) bool { return v > 1<<20 }},
		{name: "process_open_fds", ok: func(v float64) bool { return v >= 3 }},
		{name: "process_max_fds", ok: func(v float64) bool { return v >= 3 }},
		{name: "process_start_time_seconds", ok: func(v float64) bool { return v > 1.6e9 }},
	} {
		if v, ok := got[tt.name]; !ok || !tt.ok(v) {
			t.Errorf("%s = %v (present %v)", tt.name, v, ok)
		}
	}
}

func BenchmarkCounterInc(b *testing.B) {
	c := NewCounter(Opts{Name: "x_total", Help: "X."})
	b.ReportAllocs()
	for b.Loop() {
		c.Inc()
	}
}

func BenchmarkHistogramObserve(b *testing.B) {
	h := NewHistogram(HistogramOpts{Name: "x_seconds", Help: "X.", Buckets: pow4(1e-5, 10)})
	b.ReportAllocs()
	for b.Loop() {
		h.Observe(0.002)
	}
}

// pow4 returns n bounds from start, each four times the one before.
func pow4(start float64, n int) []float64 {
	b := make([]float64, n)
	for i := range b {
		b[i] = start
		start *= 4
	}
	return b
}
