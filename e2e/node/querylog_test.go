package node

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// testQueryLogAnnotation switches the query log of the running injected
// pod "app" with its annotation: the kubelet rewrites the downward API
// file the webhook mounted, the agent reads it, and lines are written
// (meshdns_dns_query_log_lines_total) for the application's lookups; "off"
// stops them. No container restarts.
func testQueryLogAnnotation(t *testing.T, e *env) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const written = `meshdns_dns_query_log_lines_total{outcome="written"}`
	ip := podIP(t, ctx, e, "demo", "app")
	if n := agentMetric(t, ip, written); n != 0 {
		t.Fatalf("%v query log lines before the annotation, want 0 (off by default)", n)
	}
	annotate := func(v string) {
		t.Helper()
		patch := []byte(`{"metadata":{"annotations":{"meshdns.io/query-log":"` + v + `"}}}`)
		if _, err := e.c.Client.CoreV1().Pods("demo").Patch(ctx, "app", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	restarts := agentRestarts(t, ctx, e, "demo", "app")
	annotate("all")
	t0 := time.Now()
	for agentMetric(t, ip, written) == 0 {
		if ctx.Err() != nil {
			t.Fatal("no query log line after annotating the pod meshdns.io/query-log=all")
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("query log on %.1fs after the annotation", time.Since(t0).Seconds())

	annotate("off")
	// Off once two reads a few lookup rounds apart agree.
	var before float64
	for {
		before = agentMetric(t, ip, written)
		time.Sleep(2 * time.Second)
		if agentMetric(t, ip, written) == before {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("query log lines still written after meshdns.io/query-log=off")
		}
	}
	if r := agentRestarts(t, ctx, e, "demo", "app"); r != restarts {
		t.Errorf("the sidecar restarted (%d -> %d): the switch must not need one", restarts, r)
	}
}
