package agentcmd

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata/agent_metrics_*.golden from the running agent")

// TestAgentMetricsGolden scrapes the agent's /metrics over HTTP, parses it
// with Prometheus's own text parser, and compares every family's name,
// type, help text and the label sets of its series with a golden file: the
// metrics a dashboard or alert reads must not change under it. Values are
// not compared; label values that name the build are masked.
func TestAgentMetricsGolden(t *testing.T) {
	tests := []struct {
		name   string
		args   []string // beyond the addresses
		golden string
	}{
		{name: "file", args: []string{"--nametable-file", "../../../examples/nametable.json"}, golden: "testdata/agent_metrics_file.golden"},
		// A control plane that is not there: the client's metrics are
		// registered and their fixed series exist from the start.
		{name: "controlplane", args: []string{"--control-plane", testenv.FreeAddr(t)}, golden: "testdata/agent_metrics_controlplane.golden"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := scrapeAgentMetrics(t, tt.args)
			if *updateGolden {
				if err := os.WriteFile(tt.golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(tt.golden)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(string(want), got); diff != "" {
				t.Errorf("/metrics differs from %s (-want +got):\n%s", tt.golden, diff)
			}
		})
	}
}

// scrapeAgentMetrics runs the agent in this process with args, asks it
// one name of the example table, and returns the shape of its /metrics.
func scrapeAgentMetrics(t *testing.T, args []string) string {
	t.Helper()
	dnsAddr, adminAddr := testenv.FreeAddr(t), testenv.FreeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, append([]string{"--namespace", "demo", "--resolv-conf", "../../../examples/resolv.conf",
			"--upstream", "127.0.0.53", "--dns-addr", dnsAddr, "--admin-addr", adminAddr, "--log-level", "error"}, args...), io.Discard, io.Discard)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent: %v", err)
		}
	})
	testenv.Eventually(t, "agent serving /metrics", 5*time.Second, func() bool {
		resp, err := http.Get("http://" + adminAddr + "/healthz/live")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	// One question over UDP, so the lazily created query series show up:
	// a table answer with the file, SERVFAIL (no table yet) without.
	m := new(dns.Msg)
	m.SetQuestion("web.demo.svc.cluster.local.", dns.TypeA)
	if _, _, err := (&dns.Client{Timeout: 2 * time.Second}).Exchange(m, dnsAddr); err != nil {
		t.Fatal(err)
	}

	resp, err := http.Get("http://" + adminAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Errorf("Content-Type = %q, want the text format 0.0.4", ct)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	families, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return metricShape(families)
}

// maskedLabels vary with the build or the table, not with the code.
var maskedLabels = map[string]bool{"version": true, "revision": true, "goversion": true}

// metricShape renders families as sorted lines: HELP, TYPE, then one line
// per series with its label pairs (histogram buckets and summary quantiles
// included, since they are part of what a query reads).
func metricShape(families map[string]*dto.MetricFamily) string {
	var b strings.Builder
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for n := range families {
			if !yield(n) {
				return
			}
		}
	}) {
		mf := families[name]
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n", name, mf.GetHelp(), name, strings.ToLower(mf.GetType().String()))
		var series []string
		for _, m := range mf.GetMetric() {
			var pairs []string
			for _, l := range m.GetLabel() {
				v := l.GetValue()
				if maskedLabels[l.GetName()] {
					v = "*"
				}
				pairs = append(pairs, fmt.Sprintf("%s=%q", l.GetName(), v))
			}
			labels := strings.Join(pairs, ",")
			switch {
			case m.Histogram != nil:
				for _, bk := range m.Histogram.GetBucket() {
					series = append(series, fmt.Sprintf("%s_bucket{%s}", name, strings.Join(append(slices.Clone(pairs), fmt.Sprintf("le=%q", fmt.Sprint(bk.GetUpperBound()))), ",")))
				}
				series = append(series, fmt.Sprintf("%s_bucket{%s}", name, strings.Join(append(slices.Clone(pairs), `le="+Inf"`), ",")))
				series = append(series, fmt.Sprintf("%s_sum{%s}", name, labels), fmt.Sprintf("%s_count{%s}", name, labels))
			case m.Summary != nil:
				for _, q := range m.Summary.GetQuantile() {
					series = append(series, fmt.Sprintf("%s{%s}", name, strings.Join(append(slices.Clone(pairs), fmt.Sprintf("quantile=%q", fmt.Sprint(q.GetQuantile()))), ",")))
				}
				series = append(series, fmt.Sprintf("%s_sum{%s}", name, labels), fmt.Sprintf("%s_count{%s}", name, labels))
			default:
				series = append(series, fmt.Sprintf("%s{%s}", name, labels))
			}
		}
		slices.Sort(series)
		for _, s := range slices.Compact(series) {
			b.WriteString(s + "\n")
		}
	}
	return b.String()
}
