package controlplane_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshdns/meshdns/controlplane"
	"github.com/meshdns/meshdns/controlplane/agentsettings"
	"github.com/meshdns/meshdns/controlplane/forwardsource"
	"github.com/meshdns/meshdns/controlplane/internal/cptest"
	"github.com/meshdns/meshdns/controlplane/podmeta"
	"github.com/meshdns/meshdns/controlplane/policysource"
	"github.com/meshdns/meshdns/controlplane/registry"
	"github.com/meshdns/meshdns/internal/testkit/kubetest"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// TestSharedPodLabels: forwarding rules and DNS policies that select the
// same pods by label share the control plane's one pod label cache, run
// by the control plane: on a real API server one watch serves both, and
// relabelling the pod takes both the rule and the policy away from its
// agent (a real gRPC stream).
func TestSharedPodLabels(t *testing.T) {
	c := kubetest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns := c.Namespace(t, "shop")
	pods := c.Client.CoreV1().Pods(ns)
	web, err := pods.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	write := func(name, content string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	rules := write("forwarding.yaml", fmt.Sprintf("rules:\n- name: web-corp\n  namespaces: [%s]\n"+
		"  podSelector: {matchLabels: {app: web}}\n  domains: [corp.example]\n  upstreams: [10.0.0.53]\n", ns))
	policy := write("policy.yaml", fmt.Sprintf("apiVersion: meshdns.io/v1alpha1\nkind: DNSPolicy\n"+
		"metadata: {name: web, namespace: %s}\nspec: {podSelector: {matchLabels: {app: web}}, rules: [{pattern: a.example, action: Deny}]}\n", ns))

	var log testenv.Buffer
	shared, err := podmeta.New(podmeta.Config{Config: c.Config, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	fwd, err := forwardsource.NewFile(forwardsource.FileConfig{Path: rules, Pods: shared})
	if err != nil {
		t.Fatal(err)
	}
	store := policysource.NewStore()
	// Without the DNSPolicy CRD the API's policies are none; the file's
	// policy selects by label, and Kube asks the cache for its namespace.
	kube, err := policysource.NewKube(policysource.KubeConfig{Config: c.Config, Store: store, Pods: shared, NoStatus: true})
	if err != nil {
		t.Fatal(err)
	}
	files, err := policysource.NewFile(policysource.FileConfig{Paths: []string{policy}, Store: store})
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, controlplane.Config{Entries: []string{t.TempDir()}, Sources: []registry.Source{kube, files},
		SettingsParts: []agentsettings.Part{store, fwd}, Pods: shared})

	a := &policyAgent{Agent: cptest.Dial(t, r.grpc, cptest.DialOpts{Namespace: ns, Pod: "web", Features: []string{"policy", "forwarding"}})}
	forwarding := func(want ...string) func(*meshdnsv1.DNSPolicy) bool {
		return func(*meshdnsv1.DNSPolicy) bool {
			var got []string
			for _, f := range a.Settings.GetForwarding() {
				got = append(got, f.GetSource())
			}
			return slices.Equal(got, want)
		}
	}
	a.until(t, ctx, ns+"/web", forwarding("file/web-corp"))
	if n := strings.Count(log.String(), "pod label watch started"); n != 1 {
		t.Errorf("%d pod label watches started for one namespace both need, want 1:\n%s", n, log.String())
	}

	web.Labels = map[string]string{"app": "batch"}
	if _, err := pods.Update(ctx, web, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	a.until(t, ctx, "none", forwarding())
}
