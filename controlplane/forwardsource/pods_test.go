package forwardsource

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshdns/meshdns/controlplane/auth"
	"github.com/meshdns/meshdns/controlplane/podmeta"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// TestFilePods: with a real API server, a rule with a podSelector reaches
// the agent of the pod whose labels match, and leaves it when the pod is
// relabelled; the part is ready only once the pods were listed.
func TestFilePods(t *testing.T) {
	c := cluster.Get(t)
	ns := c.Namespace(t, "fwd")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-0", Labels: map[string]string{"app": "web"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}
	pod, err := c.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "forwarding.yaml")
	rules := fmt.Sprintf(`rules:
- name: web-corp
  namespaces: [%s]
  podSelector: {matchLabels: {app: web}}
  domains: [corp.example]
  upstreams: [10.0.0.53]
`, ns)
	if err := os.WriteFile(path, []byte(rules), 0o644); err != nil {
		t.Fatal(err)
	}
	pods, err := podmeta.New(podmeta.Config{Config: c.Config})
	if err != nil {
		t.Fatal(err)
	}
	f, err := NewFile(FileConfig{Path: path, Pods: pods})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for name, run := range map[string]func(context.Context) error{"File": f.Run, "Pods": pods.Run} {
		wg.Go(func() {
			if err := run(rctx); err != nil {
				t.Errorf("%s.Run: %v", name, err)
			}
		})
	}
	t.Cleanup(func() { stop(); wg.Wait() })
	<-f.Ready()

	id := auth.Identity{Method: auth.MethodToken, Namespace: ns, Pod: "web-0"}
	domains := func() []string {
		s := &meshdnsv1.AgentSettings{}
		f.Fill(id, s)
		var out []string
		for _, r := range s.Forwarding {
			out = append(out, r.Domains...)
		}
		return out
	}
	if diff := cmp.Diff([]string{"corp.example"}, domains()); diff != "" {
		t.Errorf("web-0 labelled app=web (-want +got):\n%s", diff)
	}

	changed := f.Changed()
	pod.Labels["app"] = "batch"
	if _, err := c.Client.CoreV1().Pods(ns).Update(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	<-changed
	if got := domains(); len(got) != 0 {
		t.Errorf("web-0 relabelled app=batch: forwarding %v, want none", got)
	}
}
