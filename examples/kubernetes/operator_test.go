package kubernetes_test

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/meshdns/meshdns/internal/testkit/kubetest"
)

// TestOperatorRole installs the base on an API server with RBAC on, binds
// a user to the operator roles and asks the API server what it may do
// (SubjectAccessReview): exactly what status, top and analyze read, and
// no Secret and no write. Then it runs the real commands as that user:
// none of their requests is forbidden, while a user bound to the
// ClusterRole alone is refused the port-forward (so the check can fail).
func TestOperatorRole(t *testing.T) {
	objs := render(t, "kubernetes", "")
	bin := meshdnsBinary.Path(t)
	kc := kubetest.Start(t, kubetest.WithRBAC())
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := newCluster(t, kc)
	c.apply(ctx, objs, false)

	const (
		ns      = "meshdns-system"
		user    = "alice"
		partial = "bob" // the ClusterRole only
	)
	bind := func(u string, role bool) {
		crb := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "meshdns-operator-" + u},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "meshdns-operator"},
			Subjects:   []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: u}},
		}
		if _, err := kc.Client.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if !role {
			return
		}
		rb := &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "meshdns-operator-" + u, Namespace: ns},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "meshdns-operator"},
			Subjects:   []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: u}},
		}
		if _, err := kc.Client.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	bind(user, true)
	bind(partial, false)

	type access struct{ verb, group, resource, subresource, namespace, name string }
	canI := func(u string, a access) bool {
		t.Helper()
		sar, err := kc.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
			User: u, Groups: []string{"system:authenticated"},
			ResourceAttributes: &authzv1.ResourceAttributes{
				Verb: a.verb, Group: a.group, Resource: a.resource, Subresource: a.subresource, Namespace: a.namespace, Name: a.name,
			},
		}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return sar.Status.Allowed
	}
	for _, tt := range []struct {
		user string
		a    access
		want bool
	}{
		{user, access{verb: "list", resource: "pods"}, true},
		{user, access{verb: "list", resource: "pods", namespace: "demo"}, true},
		{user, access{verb: "list", resource: "namespaces"}, true},
		{user, access{verb: "get", resource: "pods", subresource: "portforward", namespace: ns, name: "meshdns-controlplane-x"}, true},
		{user, access{verb: "create", resource: "pods", subresource: "portforward", namespace: ns, name: "meshdns-controlplane-x"}, true},
		{user, access{verb: "get", group: "admissionregistration.k8s.io", resource: "mutatingwebhookconfigurations", name: "meshdns-sidecar-injector"}, true},
		{user, access{verb: "get", group: "apps", resource: "deployments", namespace: ns, name: "meshdns-controlplane"}, true},
		{user, access{verb: "list", group: "meshdns.io", resource: "dnspolicies"}, true},
		{user, access{verb: "get", resource: "secrets", namespace: ns, name: "meshdns-webhook-certs"}, false},
		{user, access{verb: "list", resource: "secrets", namespace: ns}, false},
		{user, access{verb: "list", resource: "secrets"}, false},
		{user, access{verb: "create", resource: "pods", subresource: "portforward", namespace: "demo", name: "web"}, false},
		{user, access{verb: "create", resource: "pods", subresource: "exec", namespace: ns, name: "meshdns-controlplane-x"}, false},
		{user, access{verb: "delete", resource: "pods", namespace: ns, name: "meshdns-controlplane-x"}, false},
		{user, access{verb: "update", group: "admissionregistration.k8s.io", resource: "mutatingwebhookconfigurations", name: "meshdns-sidecar-injector"}, false},
		{user, access{verb: "get", group: "admissionregistration.k8s.io", resource: "mutatingwebhookconfigurations", name: "other"}, false},
		{user, access{verb: "update", group: "apps", resource: "deployments", namespace: ns, name: "meshdns-controlplane"}, false},
		{user, access{verb: "update", group: "meshdns.io", resource: "dnspolicies", namespace: "demo", name: "p"}, false},
		{user, access{verb: "get", resource: "configmaps", namespace: ns, name: "meshdns-entries"}, false},
		{partial, access{verb: "create", resource: "pods", subresource: "portforward", namespace: ns, name: "meshdns-controlplane-x"}, false},
	} {
		a := tt.a
		t.Run(fmt.Sprintf("%s %s %s/%s/%s %s/%s", tt.user, a.verb, a.group, a.resource, a.subresource, a.namespace, a.name), func(t *testing.T) {
			if got := canI(tt.user, a); got != tt.want {
				t.Errorf("allowed %v, want %v", got, tt.want)
			}
		})
	}

	// A running replica (no kubelet here: the port-forward gets past the
	// API server's authorization, then finds no node to reach).
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "meshdns-controlplane-x", Namespace: ns, Labels: map[string]string{"app.kubernetes.io/name": "meshdns-controlplane"}},
		Spec: corev1.PodSpec{
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65532),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{Name: "controlplane", Image: "ghcr.io/meshdns/meshdns:v0.1.0", Args: []string{"controlplane"},
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}}},
		},
	}
	created, err := kc.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created.Status.Phase = corev1.PodRunning
	if _, err := kc.Client.CoreV1().Pods(ns).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	run := func(u string, args ...string) string {
		t.Helper()
		kubeconfig := impersonatingKubeconfig(t, kc, t.TempDir(), u)
		cmd := exec.CommandContext(ctx, bin, append(args, "--kubeconfig", kubeconfig)...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		t.Logf("%s: meshdns %s: %v\n%s", u, strings.Join(args, " "), err, out.String())
		return out.String()
	}
	outs := map[string]string{}
	for _, cmd := range []string{"analyze", "status", "top"} {
		outs[cmd] = run(user, cmd)
		if strings.Contains(outs[cmd], "forbidden") {
			t.Errorf("meshdns %s as the operator: a request was forbidden:\n%s", cmd, outs[cmd])
		}
	}
	// analyze read the webhook configuration: its caBundle is empty until
	// a control plane writes it; status reached the port-forward.
	if !strings.Contains(outs["analyze"], "MD0202") {
		t.Errorf("analyze as the operator did not read the webhook configuration:\n%s", outs["analyze"])
	}
	if !strings.Contains(outs["status"], "does not have a host assigned") {
		t.Errorf("status as the operator did not reach the port-forward:\n%s", outs["status"])
	}
	if out := run(partial, "status"); !strings.Contains(out, "forbidden") {
		t.Errorf("status without the Role was not refused the port-forward:\n%s", out)
	}
}
