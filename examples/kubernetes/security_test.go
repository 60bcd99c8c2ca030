package kubernetes_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	authzv1 "k8s.io/api/authorization/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/meshdns/meshdns/internal/testkit/kubetest"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

// find returns the rendered object of kind and name, converted to out.
func find(t *testing.T, objs []*unstructured.Unstructured, kind, name string, out any) {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, out); err != nil {
				t.Fatalf("%s %s: %v", kind, name, err)
			}
			return
		}
	}
	t.Fatalf("no %s %s in the render", kind, name)
}

// admitted describes, for each port a NetworkPolicy opens, the peers it
// admits: "pods" (every pod of every namespace), "any address" (ipBlocks
// 0.0.0.0/0 and ::/0) or "namespace NAME".
func admitted(t *testing.T, np networkingv1.NetworkPolicy) map[int32][]string {
	t.Helper()
	out := map[int32][]string{}
	for _, rule := range np.Spec.Ingress {
		var peers []string
		for _, p := range rule.From {
			switch {
			case p.IPBlock != nil && (p.IPBlock.CIDR == "0.0.0.0/0" || p.IPBlock.CIDR == "::/0") && len(p.IPBlock.Except) == 0:
				if !slices.Contains(peers, "any address") {
					peers = append(peers, "any address")
				}
			case p.NamespaceSelector != nil && p.PodSelector == nil && len(p.NamespaceSelector.MatchLabels) == 0 &&
				len(p.NamespaceSelector.MatchExpressions) == 0:
				peers = append(peers, "pods")
			case p.NamespaceSelector != nil && p.PodSelector == nil && len(p.NamespaceSelector.MatchLabels) == 1:
				peers = append(peers, "namespace "+p.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"])
			default:
				t.Fatalf("unexpected peer %+v", p)
			}
		}
		if len(rule.From) == 0 {
			t.Fatalf("rule %+v admits everyone without saying so", rule)
		}
		for _, port := range rule.Ports {
			if port.Port == nil || (port.Protocol != nil && *port.Protocol != "TCP") {
				t.Fatalf("rule port %+v: want a numbered TCP port", port)
			}
			out[port.Port.IntVal] = append(out[port.Port.IntVal], peers...)
		}
	}
	return out
}

// TestNetworkPolicies checks the control planes' NetworkPolicies as
// rendered: they select the Deployments' pods, open exactly the ports the
// containers declare (a new port cannot be added without its rule), and
// to whom.
func TestNetworkPolicies(t *testing.T) {
	tests := []struct {
		dir, deploy string
		want        map[int32][]string
	}{
		{dir: "kubernetes", deploy: "meshdns-controlplane", want: map[int32][]string{
			15012: {"pods"}, 15017: {"any address"}, 15015: {"namespace monitoring"},
		}},
		{dir: "overlays/vm", deploy: "meshdns-controlplane-vm", want: map[int32][]string{
			15012: {"any address"}, 15015: {"namespace monitoring"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.dir, func(t *testing.T) {
			objs := render(t, tt.dir, "")
			var np networkingv1.NetworkPolicy
			find(t, objs, "NetworkPolicy", tt.deploy, &np)
			var d appsv1.Deployment
			find(t, objs, "Deployment", tt.deploy, &d)
			if np.Namespace != d.Namespace {
				t.Errorf("policy in %q, Deployment in %q", np.Namespace, d.Namespace)
			}
			sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
			if err != nil || sel.Empty() || !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
				t.Errorf("podSelector %v does not select the Deployment's pods %v (%v)", sel, d.Spec.Template.Labels, err)
			}
			if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) {
				t.Errorf("policyTypes %v, want [Ingress] only", np.Spec.PolicyTypes)
			}
			if diff := cmp.Diff(tt.want, admitted(t, np)); diff != "" {
				t.Errorf("ports and peers (-want +got):\n%s", diff)
			}
			declared := map[int32][]string{}
			for _, c := range d.Spec.Template.Spec.Containers {
				for _, p := range c.Ports {
					declared[p.ContainerPort] = tt.want[p.ContainerPort]
				}
			}
			if diff := cmp.Diff(tt.want, declared); diff != "" {
				t.Errorf("the containers' ports and the policy's differ (-policy +containers):\n%s", diff)
			}
		})
	}
	// Every other pod of the install is left alone: only the control
	// planes are selected.
	for _, o := range render(t, "overlays/vm", "") {
		if o.GetKind() == "NetworkPolicy" && o.GetName() != "meshdns-controlplane" && o.GetName() != "meshdns-controlplane-vm" {
			t.Errorf("unexpected NetworkPolicy %s", o.GetName())
		}
	}
}

// TestVMOverlayRBAC installs the VM overlay's accounts and roles on an
// API server with RBAC on and asks it (SubjectAccessReview, as `kubectl
// auth can-i --as` does) what each control plane may do: the VM-facing
// one lists and watches what it serves and creates TokenReviews, and can
// reach no Secret and no webhook configuration; the in-cluster one keeps
// what its webhook needs (which also shows the checks can fail).
func TestVMOverlayRBAC(t *testing.T) {
	objs := render(t, "overlays/vm", "")
	var d appsv1.Deployment
	find(t, objs, "Deployment", "meshdns-controlplane-vm", &d)
	if got := d.Spec.Template.Spec.ServiceAccountName; got != "meshdns-controlplane-vm" {
		t.Fatalf("the VM control plane runs as %q, want meshdns-controlplane-vm", got)
	}
	if d.Spec.Template.Spec.AutomountServiceAccountToken != nil && !*d.Spec.Template.Spec.AutomountServiceAccountToken {
		t.Fatal("the VM control plane has no token: it needs one to list Services and review tokens")
	}

	kc := kubetest.Start(t, kubetest.WithRBAC())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := newCluster(t, kc)
	var rbac []*unstructured.Unstructured
	for _, o := range objs {
		switch o.GetKind() {
		case "Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
			rbac = append(rbac, o)
		}
	}
	c.apply(ctx, rbac, false)

	const (
		ns   = "meshdns-system"
		vm   = "system:serviceaccount:" + ns + ":meshdns-controlplane-vm"
		base = "system:serviceaccount:" + ns + ":meshdns-controlplane"
	)
	type access struct{ verb, group, resource, subresource, namespace, name string }
	canI := func(user string, a access) bool {
		t.Helper()
		sar, err := kc.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
			User:   user,
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
			ResourceAttributes: &authzv1.ResourceAttributes{
				Verb: a.verb, Group: a.group, Resource: a.resource, Subresource: a.subresource, Namespace: a.namespace, Name: a.name,
			},
		}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return sar.Status.Allowed
	}
	tests := []struct {
		user string
		a    access
		want bool
	}{
		{vm, access{verb: "list", resource: "services"}, true},
		{vm, access{verb: "watch", resource: "services"}, true},
		{vm, access{verb: "list", group: "discovery.k8s.io", resource: "endpointslices"}, true},
		{vm, access{verb: "watch", group: "discovery.k8s.io", resource: "endpointslices"}, true},
		{vm, access{verb: "create", group: "authentication.k8s.io", resource: "tokenreviews"}, true},
		{vm, access{verb: "get", resource: "secrets", namespace: ns, name: "meshdns-webhook-certs"}, false},
		{vm, access{verb: "list", resource: "secrets", namespace: ns}, false},
		{vm, access{verb: "create", resource: "secrets", namespace: ns}, false},
		{vm, access{verb: "get", resource: "secrets", namespace: ns, name: "meshdns-controlplane-vm-tls"}, false},
		{vm, access{verb: "update", group: "admissionregistration.k8s.io", resource: "mutatingwebhookconfigurations", name: "meshdns-sidecar-injector"}, false},
		{vm, access{verb: "patch", group: "admissionregistration.k8s.io", resource: "mutatingwebhookconfigurations", name: "meshdns-sidecar-injector"}, false},
		{vm, access{verb: "create", resource: "services", namespace: "default"}, false},
		{vm, access{verb: "list", resource: "pods"}, false},
		{vm, access{verb: "list", resource: "configmaps", namespace: ns}, false},
		{base, access{verb: "get", resource: "secrets", namespace: ns, name: "meshdns-webhook-certs"}, true},
		{base, access{verb: "update", group: "admissionregistration.k8s.io", resource: "mutatingwebhookconfigurations", name: "meshdns-sidecar-injector"}, true},
		{base, access{verb: "update", resource: "configmaps", namespace: "default", name: "meshdns-ca"}, true},
		{base, access{verb: "create", resource: "configmaps", namespace: "default"}, true},
		{base, access{verb: "get", resource: "configmaps", namespace: "default", name: "other"}, false},
		{base, access{verb: "list", resource: "configmaps", namespace: "default"}, false},
		{vm, access{verb: "update", resource: "configmaps", namespace: "default", name: "meshdns-ca"}, false},
		{vm, access{verb: "watch", group: "meshdns.io", resource: "dnspolicies"}, true},
		{vm, access{verb: "update", group: "meshdns.io", resource: "dnspolicies", subresource: "status", namespace: "default", name: "p"}, false},
		{vm, access{verb: "watch", resource: "pods"}, false},
		{base, access{verb: "watch", group: "meshdns.io", resource: "dnspolicies"}, true},
		{base, access{verb: "update", group: "meshdns.io", resource: "dnspolicies", subresource: "status", namespace: "default", name: "p"}, true},
		{base, access{verb: "update", group: "meshdns.io", resource: "dnspolicies", namespace: "default", name: "p"}, false},
		{base, access{verb: "watch", resource: "pods"}, true},
		{base, access{verb: "get", resource: "pods", namespace: "default", name: "p"}, false},
	}
	// The API server's authorizer learns new roles from its own watch, a
	// moment after they are created: wait until every grant is in force
	// (an event, not a fixed delay), then check grants and refusals.
	testenv.Eventually(t, "the installed roles in force", time.Minute, func() bool {
		for _, tt := range tests {
			if tt.want && !canI(tt.user, tt.a) {
				return false
			}
		}
		return true
	})
	for _, tt := range tests {
		a := tt.a
		name := fmt.Sprintf("%s %s %s/%s %s", tt.user[len("system:serviceaccount:"+ns+":"):], a.verb, a.group, a.resource, a.name)
		t.Run(name, func(t *testing.T) {
			if got := canI(tt.user, a); got != tt.want {
				t.Errorf("allowed %v, want %v", got, tt.want)
			}
		})
	}
}
