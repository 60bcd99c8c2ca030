package node

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

var dnsPolicies = schema.GroupVersionResource{Group: "meshdns.io", Version: "v1alpha1", Resource: "dnspolicies"}

// testPolicy: the install's DNSPolicy CRD, an object selecting a labelled
// pod by label, served by the control plane (with the install's RBAC) to
// that pod's agent: the pod resolves the allowed name, is denied another
// (which stops reaching the cluster DNS); under a policy in audit mode a
// second pod resolves both and its agent counts the denials.
func testPolicy(t *testing.T, e *env) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dyn, err := dynamic.NewForConfig(e.c.Config)
	if err != nil {
		t.Fatal(err)
	}
	e.c.InstallCRD(t, "../../examples/kubernetes/15-dnspolicy-crd.yaml")
	ri := dyn.Resource(dnsPolicies).Namespace("demo")
	// The parts after this one run without its pods and policies.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, name := range []string{"policed", "audited"} {
			_ = e.c.Client.CoreV1().Pods("demo").Delete(ctx, name, metav1.DeleteOptions{})
		}
		for _, name := range []string{"egress", "egress-audit"} {
			_ = ri.Delete(ctx, name, metav1.DeleteOptions{})
		}
	})
	create := func(name, app, mode string) {
		t.Helper()
		u := &unstructured.Unstructured{}
		doc := "apiVersion: meshdns.io/v1alpha1\nkind: DNSPolicy\nmetadata: {name: " + name + "}\n" +
			"spec: {podSelector: {matchLabels: {app: " + app + "}}, mode: " + mode + ", outsideDefault: Deny, rules: [{pattern: www.example.org, action: Allow}]}"
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, "DNSPolicy "+name+" created (the CRD served)", time.Minute, func() bool {
			_, err := ri.Create(ctx, u, metav1.CreateOptions{})
			return err == nil
		})
		// The control plane lists policies again with backoff after the
		// CRD appears; its Accepted condition says it took this one.
		testenv.Eventually(t, "DNSPolicy "+name+" accepted by the control plane", 2*time.Minute, func() bool {
			got, err := ri.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false
			}
			conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
			for _, c := range conds {
				if m := c.(map[string]any); m["type"] == "Accepted" && m["status"] == "True" {
					return true
				}
			}
			return false
		})
	}
	create("egress", "policed", "Enforce")

	const allowed, denied = "www.example.org", "denied.example.org"
	names := []string{allowed, denied}
	start := func(name, app string) {
		t.Helper()
		pod := appPod(name, names)
		pod.Labels = map[string]string{"app": app}
		// Where a policy enforces, the webhook refuses a container that
		// could run as the agent's ids (the image's own user) or gain
		// privileges.
		id, no := int64(1000), false
		pod.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: &id, RunAsGroup: &id}
		pod.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{AllowPrivilegeEscalation: &no}
		if _, err := e.c.Client.CoreV1().Pods("demo").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	start("policed", "policed")

	// Enforced: the allowed name resolves, the denied one is NXDOMAIN.
	got := e.waitResults(t, "demo", "policed", func(r map[string]string) bool {
		return r[allowed] == "ok "+externalIP && strings.HasPrefix(r[denied], "err ")
	})
	t.Logf("under the enforced policy: %v", got)
	// From then on the denied name never reaches the cluster DNS: two
	// more rounds of lookups (every 200 ms) add nothing.
	before := e.standIn.asked(denied + ".")
	rounds := e.resultCount(t, "demo", "policed", denied)
	testenv.Eventually(t, "two more lookups", time.Minute, func() bool { return e.resultCount(t, "demo", "policed", denied) >= rounds+2 })
	if after := e.standIn.asked(denied + "."); after != before {
		t.Errorf("the denied name reached the cluster DNS %d times after the policy applied", after-before)
	}

	// Audit (after the count above: this pod's lookups of the denied
	// name reach the cluster DNS): both resolve, and the agent counts
	// the denials.
	create("egress-audit", "audited", "Audit")
	start("audited", "audited")
	got = e.waitResults(t, "demo", "audited", func(r map[string]string) bool {
		return r[allowed] == "ok "+externalIP && r[denied] == "ok "+externalIP
	})
	t.Logf("under the audit policy: %v", got)
	p, err := e.c.Client.CoreV1().Pods("demo").Get(ctx, "audited", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n := agentMetric(t, p.Status.PodIP, `meshdns_policy_decisions_total{action="deny",mode="audit"}`); n < 1 {
		t.Errorf("the audit agent counted %v denials, want at least one", n)
	}
	if n := agentMetric(t, p.Status.PodIP, `meshdns_policy_decisions_total{action="deny",mode="enforce"}`); n != 0 {
		t.Errorf("the audit agent enforced %v denials", n)
	}
}

// waitResults waits until the app's latest results satisfy ok and
// returns them.
func (e *env) waitResults(t *testing.T, ns, pod string, ok func(map[string]string) bool) map[string]string {
	t.Helper()
	var last map[string]string
	testenv.Eventually(t, "results of "+pod, 2*time.Minute, func() bool {
		last = map[string]string{}
		for _, line := range strings.Split(e.n.ContainerLog(ns, pod, "app"), "\n") {
			if f := strings.SplitN(line, " ", 4); len(f) == 4 && f[0] == "RESULT" {
				last[f[2]] = f[3]
			}
		}
		return ok(last)
	})
	return last
}

// resultCount is how many lookups of name the app has logged.
func (e *env) resultCount(t *testing.T, ns, pod, name string) int {
	t.Helper()
	n := 0
	for _, line := range strings.Split(e.n.ContainerLog(ns, pod, "app"), "\n") {
		if f := strings.SplitN(line, " ", 4); len(f) == 4 && f[0] == "RESULT" && f[2] == name {
			n++
		}
	}
	return n
}
