package policysource

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshdns/meshdns/internal/testkit/kubetest"
)

// policyEvents returns the events recorded on the DNSPolicy ns/name.
func policyEvents(t *testing.T, ctx context.Context, c *kubetest.Cluster, ns, name string) []eventsv1.Event {
	t.Helper()
	l, err := c.Client.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []eventsv1.Event
	for _, e := range l.Items {
		if e.Regarding.Kind == "DNSPolicy" && e.Regarding.Name == name {
			out = append(out, e)
		}
	}
	return out
}

// tlog writes a source's warnings to the test's log.
type tlog struct{ t *testing.T }

func (w tlog) Write(p []byte) (int, error) { w.t.Log(strings.TrimSpace(string(p))); return len(p), nil }

// startKube runs a Kube source on c until the test ends or stop is
// called, and returns once its first list is handled.
func startKube(t *testing.T, ctx context.Context, c *kubetest.Cluster, instance string) (stop func()) {
	t.Helper()
	src, err := NewKube(KubeConfig{Config: c.Config, Store: NewStore(), Instance: instance, NoPodLabels: true,
		Logger: slog.New(slog.NewTextHandler(tlog{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	sk := newSink()
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- src.Run(rctx, sk) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	select {
	case <-sk.got:
	case <-ctx.Done():
		t.Fatal("no snapshot after the first list")
	}
	return stop
}

// TestInvalidEvent: a refused generation gets one Warning event naming the
// error, recorded by whichever control plane writes the refusal first; a
// second replica, a resync, metadata edits and the fixed generation add
// none.
func TestInvalidEvent(t *testing.T) {
	c, dyn := withCRD(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns := c.Namespace(t, "events")
	startKube(t, ctx, c, "replica-a")

	doc := "apiVersion: meshdns.io/v1alpha1\nkind: DNSPolicy\nmetadata: {name: bad%s}\n" +
		"spec: {rules: [{pattern: a.example, action: Allow}, {pattern: A.Example., action: Deny}]}"
	bad := apply(t, dyn, ns, strings.ReplaceAll(doc, "%s", ""))
	cond := waitStatus(t, ctx, dyn, ns, "bad", bad.GetGeneration(), "False")
	var evs []eventsv1.Event
	for len(evs) == 0 {
		if evs = policyEvents(t, ctx, c, ns, "bad"); len(evs) > 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("no event for a refused DNSPolicy")
		case <-time.After(50 * time.Millisecond):
		}
	}
	e := evs[0]
	if len(evs) != 1 || e.Type != corev1.EventTypeWarning || e.Reason != EventReasonInvalid ||
		e.ReportingController != EventController || e.ReportingInstance != "replica-a" ||
		e.Regarding.UID != bad.GetUID() || e.Note != cond["message"] || !strings.Contains(e.Note, "is in conflict with") {
		t.Fatalf("events %+v, want one %s Warning with the condition's message %q", evs, EventReasonInvalid, cond["message"])
	}

	// A second replica (or a restart) finds the refusal written: no event.
	startKube(t, ctx, c, "replica-b")
	// A metadata edit is a new resource version of the same generation.
	cur, err := dyn.Resource(Resource).Namespace(ns).Get(ctx, "bad", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.SetLabels(map[string]string{"touched": "yes"})
	if _, err := dyn.Resource(Resource).Namespace(ns).Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Fixed, the object is accepted with no event.
	fixed := apply(t, dyn, ns, "apiVersion: meshdns.io/v1alpha1\nkind: DNSPolicy\nmetadata: {name: bad}\n"+
		"spec: {rules: [{pattern: a.example, action: Deny}]}")
	waitStatus(t, ctx, dyn, ns, "bad", fixed.GetGeneration(), "True")
	if got := policyEvents(t, ctx, c, ns, "bad"); len(got) != 1 {
		t.Errorf("%d events after a second replica, a metadata edit and a fix, want 1: %+v", len(got), got)
	}

	// Broken again: a new generation refused, a new event.
	broken := apply(t, dyn, ns, strings.ReplaceAll(doc, "%s", ""))
	waitStatus(t, ctx, dyn, ns, "bad", broken.GetGeneration(), "False")
	for {
		got := policyEvents(t, ctx, c, ns, "bad")
		if len(got) == 2 {
			break
		}
		if len(got) > 2 {
			t.Fatalf("%d events for two refused generations (two replicas), want 2: %+v", len(got), got)
		}
		select {
		case <-ctx.Done():
			t.Fatal("no event for a newly refused generation")
		case <-time.After(50 * time.Millisecond):
		}
	}
	// A replica started now does not know the last valid generation is
	// still served by the others: it would word the refusal otherwise,
	// and the replicas would rewrite each other's status for as long as
	// the object stays broken. It leaves the refusal as written, and the
	// generation's refusal is not news.
	before := waitStatus(t, ctx, dyn, ns, "bad", broken.GetGeneration(), "False")
	if msg, _ := before["message"].(string); !strings.Contains(msg, fmt.Sprintf("generation %d is still served", fixed.GetGeneration())) {
		t.Fatalf("refusal %q, want the served generation %d named", msg, fixed.GetGeneration())
	}
	rv := func() string {
		cur, err := dyn.Resource(Resource).Namespace(ns).Get(ctx, "bad", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return cur.GetResourceVersion()
	}
	had := rv()
	startKube(t, ctx, c, "replica-c")() // returns after its first pass, writes included
	if now := rv(); now != had {
		t.Errorf("a replica started after the break rewrote the refusal (resource version %s -> %s)", had, now)
	}
	if got := policyEvents(t, ctx, c, ns, "bad"); len(got) != 2 {
		t.Errorf("%d events after a restart, want 2: %+v", len(got), got)
	}
}

func TestTruncate(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		n        int
		want     string
	}{
		{name: "short", in: "abc", n: 5, want: "abc"},
		{name: "cut", in: "abcdefgh", n: 6, want: "abc..."},
		{name: "rune boundary", in: "ab\u00e9\u00e9\u00e9", n: 6, want: "ab..."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := truncate(tc.in, tc.n); got != tc.want || len(got) > tc.n {
				t.Errorf("truncate(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
			}
		})
	}
}
