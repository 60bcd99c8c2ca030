package monitoring_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/rest"

	"github.com/meshdns/meshdns/agent"
	"github.com/meshdns/meshdns/controlplane"
	"github.com/meshdns/meshdns/controlplane/kubesource"
	"github.com/meshdns/meshdns/controlplane/registry"
	"github.com/meshdns/meshdns/controlplane/selfcert"
	"github.com/meshdns/meshdns/controlplane/webhook"
	meshmetrics "github.com/meshdns/meshdns/internal/metrics"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

// family is what a query may assume of a registered metric family.
type family struct {
	histogram bool            // or summary: it has _sum and _count (and, a histogram, _bucket)
	buckets   bool            // a histogram: it has _bucket
	labels    map[string]bool // or nil when the registry does not say
}

// agentFamilies runs the agent as the injected sidecar runs it (streaming
// from a control plane, here one that is not there, so it has no table),
// with the collectors cmd/meshdns adds (Go, process; only
// meshdns_build_info, which cmd/meshdns adds itself, is not there: the
// rules and the dashboard must not need it). The registry lists every
// family; its label names are read from /metrics after a question of each
// kind (a cluster name, an outside name to an upstream that refuses, a
// malformed packet) has made the labelled series. A family that still has
// no series keeps nil labels, and a query matching on its labels fails.
func agentFamilies(t *testing.T) map[string]family {
	t.Helper()
	reg := meshmetrics.NewRegistry()
	reg.MustRegister(meshmetrics.GoCollector{}, meshmetrics.ProcessCollector{})
	a, err := agent.New(agent.Config{
		Registry:      reg,
		Namespace:     "demo",
		ControlPlanes: []string{closedAddr(t)},
		ResolvConf:    "../resolv.conf",
		Upstreams:     []string{closedAddr(t)},
		DNSAddrs:      []string{"127.0.0.1:0"},
		AdminAddr:     "-",
		Logger:        slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent: %v", err)
		}
	})
	addr := a.DNSAddr().String()
	for _, name := range []string{"web.demo.svc.cluster.local.", "example.org."} {
		m := new(dns.Msg)
		m.SetQuestion(name, dns.TypeA)
		r, _, err := (&dns.Client{Timeout: 30 * time.Second}).Exchange(m, addr)
		if err != nil || r.Rcode != dns.RcodeServerFailure {
			t.Fatalf("%s: %v %v, want SERVFAIL (no table, no upstream)", name, r, err)
		}
	}
	c, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	var text bytes.Buffer
	testenv.Eventually(t, "the malformed packet counted", 10*time.Second, func() bool {
		text.Reset()
		if err := reg.WriteText(&text); err != nil {
			t.Fatal(err)
		}
		return strings.Contains(text.String(), "meshdns_dns_dropped_total{")
	})
	p := expfmt.NewTextParser(model.LegacyValidation)
	scraped, err := p.TextToMetricFamilies(&text)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	out := map[string]family{}
	for _, d := range reg.Descs() {
		h := d.Type == meshmetrics.HistogramType
		f := family{histogram: h, buckets: h}
		if mf, ok := scraped[d.Name]; ok {
			f.labels = map[string]bool{}
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() != "le" {
						f.labels[l.GetName()] = true
					}
				}
			}
		}
		out[d.Name] = f
	}
	return out
}

// controlPlaneFamilies registers everything the control plane binary
// registers, the way cmd/meshdns does: one client_golang registry for the
// Go and process collectors, the control plane (entries files, registry,
// views, gRPC server), the Kubernetes source, the injection webhook and
// the self-managed webhook certificate. Nothing reaches an API server:
// the constructors do no I/O. Every collector is recorded as it is
// registered, and its descriptions (name and label names) read back.
func controlPlaneFamilies(t *testing.T) map[string]family {
	t.Helper()
	reg := prometheus.NewRegistry()
	rec := &recorder{Registerer: reg}
	rec.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	rc := &rest.Config{Host: "http://" + closedAddr(t)}
	client, err := kubesource.NewClientForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	kube, err := kubesource.New(kubesource.Config{Client: client, Registerer: rec})
	if err != nil {
		t.Fatal(err)
	}
	w, err := webhook.New(webhook.Config{Registerer: rec})
	if err != nil {
		t.Fatal(err)
	}
	api, err := selfcert.NewAPI(rc)
	if err != nil {
		t.Fatal(err)
	}
	certs, err := selfcert.New(selfcert.Config{API: api, Namespace: "meshdns-system", DNSNames: []string{"meshdns-controlplane.meshdns-system.svc"}, Registerer: rec})
	if err != nil {
		t.Fatal(err)
	}
	entries := t.TempDir()
	if err := os.WriteFile(filepath.Join(entries, "entries.yaml"), []byte("entries: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := controlplane.New(controlplane.Config{
		AdminAddr:    "127.0.0.1:0",
		Entries:      []string{entries},
		Sources:      []registry.Source{kube},
		Webhook:      w,
		WebhookCerts: certs,
		GRPCSelfTLS:  true,
		Registerer:   rec,
		Gatherer:     reg,
	}); err != nil {
		t.Fatal(err)
	}
	return rec.families(t)
}

// recorder is a Registerer that keeps what it registers.
type recorder struct {
	prometheus.Registerer
	mu         sync.Mutex
	collectors []prometheus.Collector
}

func (r *recorder) Register(c prometheus.Collector) error {
	if err := r.Registerer.Register(c); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.collectors = append(r.collectors, c)
	return nil
}

func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// descFields reads a Desc's name and label names from its String, the only
// place client_golang shows them: Desc{fqName: "x", help: "...", unit: "",
// constLabels: {k="v"}, variableLabels: {a,c(b)}}.
var descFields = regexp.MustCompile(`^Desc\{fqName: "([^"]+)", .*constLabels: \{(.*)\}, variableLabels: \{([^{}]*)\}\}$`)

// families reads the recorded collectors' descriptions, and their types
// from the collectors themselves or, for other collectors, from what they
// collect (a vector without series collects nothing, but the vectors'
// types say it).
func (r *recorder) families(t *testing.T) map[string]family {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]family{}
	for _, c := range r.collectors {
		ch := make(chan *prometheus.Desc, 64)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			m := descFields.FindStringSubmatch(d.String())
			if m == nil {
				t.Fatalf("cannot read %s", d)
			}
			f := family{labels: map[string]bool{}}
			for _, l := range append(constLabelNames(m[2]), strings.Split(m[3], ",")...) {
				if l = strings.TrimSuffix(strings.TrimPrefix(l, "c("), ")"); l != "" {
					f.labels[l] = true
				}
			}
			switch c.(type) {
			case *prometheus.HistogramVec:
				f.histogram, f.buckets = true, true
			case *prometheus.SummaryVec:
				f.histogram = true
			}
			out[m[1]] = f
		}
		ms := make(chan prometheus.Metric, 64)
		go func() { c.Collect(ms); close(ms) }()
		for m := range ms {
			var pb dto.Metric
			if err := m.Write(&pb); err != nil {
				t.Fatal(err)
			}
			name := descFields.FindStringSubmatch(m.Desc().String())[1]
			f := out[name]
			f.histogram = f.histogram || pb.Histogram != nil || pb.Summary != nil
			f.buckets = f.buckets || pb.Histogram != nil
			out[name] = f
		}
	}
	return out
}

// constLabelNames reads the names of `k="v",k2="v2"`.
func constLabelNames(s string) []string {
	var out []string
	for _, m := range regexp.MustCompile(`(\w+)="(?:[^"\\]|\\.)*"`).FindAllStringSubmatch(s, -1) {
		out = append(out, m[1])
	}
	return out
}

// closedAddr is a loopback address where nothing listens.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// describe is for failure messages.
func (f family) String() string {
	return fmt.Sprintf("histogram=%v labels=%v", f.histogram, f.labels)
}
