package controlplane_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/meshdns/meshdns/controlplane"
	"github.com/meshdns/meshdns/controlplane/agentsettings"
	"github.com/meshdns/meshdns/controlplane/internal/cptest"
	"github.com/meshdns/meshdns/controlplane/policysource"
	"github.com/meshdns/meshdns/controlplane/registry"
	"github.com/meshdns/meshdns/internal/testkit/kubetest"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// policyAgent follows one agent's stream and records every policy its
// settings carried.
type policyAgent struct {
	*cptest.Agent
	seen []string // the policy Source of every version, "none" without one
}

// until applies and ACKs responses until the agent's policy comes from
// want ("none": no policy) and cond (when not nil) holds, however long a
// loaded machine takes.
func (a *policyAgent) until(t *testing.T, ctx context.Context, want string, cond func(*meshdnsv1.DNSPolicy) bool) {
	t.Helper()
	for a.Version == "" || a.policy() != want || (cond != nil && !cond(a.Settings.GetPolicy())) {
		select {
		case r, ok := <-a.Resps:
			if !ok {
				t.Fatalf("stream ended waiting for policy %q: %v", want, <-a.Errs)
			}
			if err := a.Apply(r); err != nil {
				t.Fatal(err)
			}
			a.Ack(r)
			a.seen = append(a.seen, a.policy())
		case <-ctx.Done():
			t.Fatalf("agent's policy is %q, want %q (seen %v)", a.policy(), want, a.seen)
		}
	}
}

func (a *policyAgent) policy() string {
	p := a.Settings.GetPolicy()
	if p == nil {
		return "none"
	}
	if !strings.Contains(strings.Join(a.Settings.GetRequires(), ","), "policy") {
		return "a policy not required: " + p.GetSource()
	}
	return p.GetSource()
}

// TestPolicyFromAPIServer: DNSPolicy objects created, updated and deleted
// on a real API server reach exactly the agents (real gRPC streams) whose
// pods they select, relabelling a pod moves it in and out, and an object
// the control plane refuses gets Accepted=False and never reaches one.
func TestPolicyFromAPIServer(t *testing.T) {
	c := kubetest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	c.InstallCRD(t, "../examples/kubernetes/15-dnspolicy-crd.yaml")
	ns := c.Namespace(t, "shop")
	pods := c.Client.CoreV1().Pods(ns)
	for name, app := range map[string]string{"checkout": "checkout", "web": "web"} {
		if _, err := pods.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": app}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	relabel := func(name, app string) {
		t.Helper()
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Labels = map[string]string{"app": app}
		if _, err := pods.Update(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ri := dyn.Resource(policysource.Resource).Namespace(ns)
	apply := func(doc string) *unstructured.Unstructured {
		t.Helper()
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			t.Fatal(err)
		}
		for {
			got, err := ri.Create(ctx, u, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				old, gerr := ri.Get(ctx, u.GetName(), metav1.GetOptions{})
				if gerr != nil {
					t.Fatal(gerr)
				}
				u.SetResourceVersion(old.GetResourceVersion())
				got, err = ri.Update(ctx, u, metav1.UpdateOptions{})
			}
			if err == nil {
				return got
			}
			// The resource is served a moment after the CRD is created.
			if !apierrors.IsNotFound(err) {
				t.Fatalf("apply %s: %v", u.GetName(), err)
			}
			select {
			case <-ctx.Done():
				t.Fatalf("apply %s: %v", u.GetName(), err)
			case <-time.After(50 * time.Millisecond):
			}
		}
	}

	store := policysource.NewStore()
	kube, err := policysource.NewKube(policysource.KubeConfig{Config: c.Config, Store: store})
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, controlplane.Config{Entries: []string{t.TempDir()}, Sources: []registry.Source{kube},
		SettingsParts: []agentsettings.Part{store}})
	dial := func(pod string) *policyAgent {
		return &policyAgent{Agent: cptest.Dial(t, r.grpc, cptest.DialOpts{Namespace: ns, Pod: pod, Features: []string{"policy"}})}
	}
	checkout, web := dial("checkout"), dial("web")
	checkout.until(t, ctx, "none", nil)
	web.until(t, ctx, "none", nil)

	selector := "apiVersion: meshdns.io/v1alpha1\nkind: DNSPolicy\nmetadata: {name: checkout}\n" +
		"spec: {podSelector: {matchLabels: {app: checkout}}, outsideDefault: Deny, rules: [{pattern: api.stripe.com, action: Allow}]}"
	apply(selector)
	checkout.until(t, ctx, ns+"/checkout", func(p *meshdnsv1.DNSPolicy) bool {
		return len(p.GetRules()) == 1 && p.GetRules()[0].GetPattern() == "api.stripe.com." &&
			p.GetOutsideDefault() == meshdnsv1.PolicyAction_POLICY_ACTION_DENY
	})

	// The agent outside the selector was sent nothing new.
	if len(web.seen) != 1 || web.policy() != "none" {
		t.Errorf("agent outside the selector: %v", web.seen)
	}

	t.Run("update", func(t *testing.T) {
		apply(strings.Replace(selector, "rules: [", "rules: [{pattern: '*.s3.amazonaws.com', action: Allow}, ", 1))
		checkout.until(t, ctx, ns+"/checkout", func(p *meshdnsv1.DNSPolicy) bool { return len(p.GetRules()) == 2 })
	})

	t.Run("relabel", func(t *testing.T) {
		relabel("web", "checkout")
		web.until(t, ctx, ns+"/checkout", nil)
		relabel("checkout", "gone")
		checkout.until(t, ctx, "none", nil)
	})

	t.Run("invalid never reaches an agent", func(t *testing.T) {
		bad := apply("apiVersion: meshdns.io/v1alpha1\nkind: DNSPolicy\nmetadata: {name: bad}\n" +
			"spec: {rules: [{pattern: a.example, action: Allow}, {pattern: A.Example., action: Deny}]}")
		for {
			u, err := ri.Get(ctx, "bad", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			if len(conds) == 1 {
				m := conds[0].(map[string]any)
				if m["type"] != "Accepted" || m["status"] != "False" || m["reason"] != "Invalid" ||
					m["observedGeneration"] != bad.GetGeneration() || !strings.Contains(m["message"].(string), "in conflict with") {
					t.Fatalf("condition %v", m)
				}
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("no Accepted condition: %v", u.Object["status"])
			case <-time.After(50 * time.Millisecond):
			}
		}
		// A valid namespace-wide policy created after it reaches both
		// agents; the invalid one, handled first, reached neither.
		apply("apiVersion: meshdns.io/v1alpha1\nkind: DNSPolicy\nmetadata: {name: marker}\nspec: {}")
		web.until(t, ctx, ns+"/checkout,"+ns+"/marker", nil)
		checkout.until(t, ctx, ns+"/marker", nil)
		for _, a := range []*policyAgent{web, checkout} {
			for _, s := range a.seen {
				if strings.Contains(s, "/bad") {
					t.Errorf("an agent was sent the invalid policy: %v", a.seen)
				}
			}
		}
	})

	t.Run("delete", func(t *testing.T) {
		for _, name := range []string{"bad", "marker", "checkout"} {
			if err := ri.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		web.until(t, ctx, "none", nil)
		checkout.until(t, ctx, "none", nil)
	})
}
