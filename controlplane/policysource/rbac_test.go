package policysource

import (
	"context"
	"slices"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/client-go/dynamic"

	"github.com/meshdns/meshdns/internal/testkit/kubetest"
)

// TestRBAC runs the source as a user holding only the install's rules for
// DNSPolicy objects, pods and events, on an API server with RBAC on: they
// let it read policies and pod labels, write the status and record the
// event of a refused policy.
func TestRBAC(t *testing.T) {
	c, asUser := kubetest.StartAsControlPlane(t, "../../examples/kubernetes/10-rbac.yaml", 4, func(r rbacv1.PolicyRule) bool {
		return slices.Contains(r.APIGroups, Resource.Group) || slices.Contains(r.Resources, "pods") ||
			slices.Contains(r.APIGroups, "events.k8s.io")
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	// Without the CRD there are no policies, and the control plane is
	// not held back waiting for them.
	noCRD, err := NewKube(KubeConfig{Config: c.Config, Store: NewStore()})
	if err != nil {
		t.Fatal(err)
	}
	sk := newSink()
	nctx, nstop := context.WithCancel(ctx)
	ndone := make(chan error, 1)
	go func() { ndone <- noCRD.Run(nctx, sk) }()
	select {
	case <-sk.got:
	case <-ctx.Done():
		t.Fatal("no snapshot from a cluster without the DNSPolicy CRD")
	}
	nstop()
	if err := <-ndone; err != nil {
		t.Errorf("Run without the CRD: %v", err)
	}

	c.InstallCRD(t, "../../examples/kubernetes/15-dnspolicy-crd.yaml")
	ns := c.Namespace(t, "rbac")
	createPod(t, ctx, c, ns, "checkout", map[string]string{"app": "checkout"})
	u := apply(t, dyn, ns, "apiVersion: meshdns.io/v1alpha1\nkind: DNSPolicy\nmetadata: {name: checkout}\n"+
		"spec: {podSelector: {matchLabels: {app: checkout}}, rules: [{pattern: a.example, action: Deny}]}")

	store := NewStore()
	src, err := NewKube(KubeConfig{Config: asUser, Store: store})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- src.Run(rctx, newSink()) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	eventually(t, ctx, store, "policy by pod label", expect(store, ns, "checkout", ns+"/checkout requires [policy]"))
	waitStatus(t, ctx, dyn, ns, "checkout", u.GetGeneration(), "True")

	bad := apply(t, dyn, ns, "apiVersion: meshdns.io/v1alpha1\nkind: DNSPolicy\nmetadata: {name: bad}\n"+
		"spec: {rules: [{pattern: a.example, action: Allow}, {pattern: A.Example., action: Deny}]}")
	waitStatus(t, ctx, dyn, ns, "bad", bad.GetGeneration(), "False")
	for len(policyEvents(t, ctx, c, ns, "bad")) == 0 {
		select {
		case <-ctx.Done():
			t.Fatal("no event recorded on a refused DNSPolicy with the install's rules")
		case <-time.After(50 * time.Millisecond):
		}
	}
}
