package failingreport

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/meshdns/meshdns/controlplane/auth"
	"github.com/meshdns/meshdns/internal/testkit/kubetest"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// cluster is one real etcd + kube-apiserver for the package's tests,
// started by the first test that needs it.
var cluster = kubetest.NewShared()

func TestMain(m *testing.M) { cluster.Main(m) }

// TestNamespaceOptIn: against a real API server, the agents of a
// namespace get the report once its label opts it in, and lose it when
// the label goes or changes; other namespaces never get it.
func TestNamespaceOptIn(t *testing.T) {
	c := cluster.Get(t)
	labelled, plain, disabled := c.Namespace(t, "failing-in"), c.Namespace(t, "failing-plain"), c.Namespace(t, "failing-off")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	label := func(ns, value string) {
		t.Helper()
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, Label, value)
		if value == "" {
			patch = fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, Label)
		}
		if _, err := c.Client.CoreV1().Namespaces().Patch(ctx, ns, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	label(labelled, Enabled)
	label(disabled, "disabled")

	p, err := New(Config{Mode: Namespaces, Kube: c.Config, TopN: 3})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := p.Run(runCtx); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	defer func() { stop(); wg.Wait() }()

	reports := func(ns string) bool {
		s := &meshdnsv1.AgentSettings{}
		p.Fill(auth.Identity{Namespace: ns, Pod: "web-0"}, s)
		r := s.GetTelemetry().GetFailingReport()
		if r != nil && (!r.GetEnabled() || r.GetTopN() != 3) {
			t.Errorf("namespace %s: report %v, want enabled with top_n 3", ns, r)
		}
		return r != nil
	}
	// wait waits for a change the Part announces until cond holds.
	wait := func(what string, cond func() bool) {
		t.Helper()
		testenv.Eventually(t, what, time.Minute, func() bool {
			ch := p.Changed()
			if cond() {
				return true
			}
			select {
			case <-ch:
			case <-time.After(time.Second):
			}
			return cond()
		})
	}
	wait("the labelled namespace opted in", func() bool { return reports(labelled) })
	if reports(plain) || reports(disabled) {
		t.Errorf("opted in: %v, want only %s", p.OptedIn(), labelled)
	}

	label(plain, Enabled)
	wait("a namespace labelled later opted in", func() bool { return reports(plain) })
	label(labelled, "")
	wait("a namespace whose label went opted out", func() bool { return !reports(labelled) })
	label(plain, "disabled")
	wait("a namespace whose label changed opted out", func() bool { return !reports(plain) })
	if got := p.OptedIn(); len(got) != 0 {
		t.Errorf("opted in at the end: %v, want none", got)
	}
}
