package upstream

import (
	"slices"
	"testing"

	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/pkg/metric"
)

// familyRegistry keeps the families as code outside the module would:
// only the pkg/metric contract, no internal type.
type familyRegistry map[string]metric.Family

func (r familyRegistry) Register(f metric.Family) error {
	r[f.Name] = f
	return nil
}

func (r familyRegistry) series(t testing.TB, name string) []metric.Series {
	t.Helper()
	f, ok := r[name]
	if !ok {
		t.Fatalf("%s not registered", name)
	}
	var out []metric.Series
	f.Collect(func(s metric.Series) {
		s.LabelValues = slices.Clone(s.LabelValues)
		s.Counts = slices.Clone(s.Counts)
		out = append(out, s)
	})
	return out
}

// A Resolver's metrics reach a plain pkg/metric registry with their
// types, labels and buckets, and the series count what it forwarded.
func TestMetricsOnPublicRegistry(t *testing.T) {
	srv := newServer(t, answerWith(t, dns.RcodeSuccess, []string{"$QNAME 60 IN A 192.0.2.1"}, nil))
	reg := familyRegistry{}
	r, err := New(Config{Upstreams: []string{srv.Addr}, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	if len(reg) != 12 {
		t.Errorf("%d families registered, want 12", len(reg))
	}
	ask(t, r, "www.example.org.", dns.TypeA)
	ask(t, r, "www.example.org.", dns.TypeA) // from the cache

	dur := reg["meshdns_upstream_request_duration_seconds"]
	if dur.Type != metric.HistogramType || !slices.Equal(dur.Labels, []string{"upstream"}) || len(dur.Buckets) != 15 {
		t.Errorf("duration family %s %v %d buckets, want a histogram by upstream with 15", dur.Name, dur.Labels, len(dur.Buckets))
	}
	ss := reg.series(t, dur.Name)
	if len(ss) != 1 || !slices.Equal(ss[0].LabelValues, []string{srv.Addr}) ||
		len(ss[0].Counts) != len(dur.Buckets)+1 || ss[0].Counts[len(dur.Buckets)] != 1 || ss[0].Sum <= 0 {
		t.Errorf("duration series %+v, want one try against %s", ss, srv.Addr)
	}
	for name, want := range map[string]float64{"meshdns_cache_hits_total": 1, "meshdns_cache_misses_total": 1, "meshdns_cache_entries": 1} {
		if ss := reg.series(t, name); len(ss) != 1 || ss[0].Value != want {
			t.Errorf("%s series %+v, want %v", name, ss, want)
		}
	}
	if reg["meshdns_cache_hits_total"].Type != metric.CounterType || reg["meshdns_cache_entries"].Type != metric.GaugeType {
		t.Error("cache families carry the wrong types")
	}
}
