package kubetest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	authzv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"

	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

// InstallRules returns the rules of the first ClusterRole in the YAML file
// at path (an install's RBAC) that keep selects, so a test grants exactly
// what the install grants.
func InstallRules(t testing.TB, path string, keep func(rbacv1.PolicyRule) bool) []rbacv1.PolicyRule {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var role rbacv1.ClusterRole
		if err := dec.Decode(&role); errors.Is(err, io.EOF) {
			t.Fatalf("no ClusterRole in %s", path)
		} else if err != nil {
			t.Fatal(err)
		}
		if role.Kind != "ClusterRole" {
			continue
		}
		var out []rbacv1.PolicyRule
		for _, r := range role.Rules {
			if keep(r) {
				out = append(out, r)
			}
		}
		return out
	}
}

// AsUserWith grants user exactly rules (a ClusterRole and its binding,
// both named name), waits until the API server's authorizer has learnt
// them (it does from its own watch, a moment after they are created), and
// returns a config that acts as user. The cluster needs WithRBAC.
func (c *Cluster) AsUserWith(t testing.TB, user, name string, rules []rbacv1.PolicyRule) *rest.Config {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}
	if _, err := c.Client.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "the rules of "+name+" in force", time.Minute, func() bool {
		for _, r := range rules {
			if len(r.Verbs) == 0 || len(r.Resources) == 0 || len(r.ResourceNames) > 0 {
				continue
			}
			resource, sub, _ := strings.Cut(r.Resources[0], "/")
			group := ""
			if len(r.APIGroups) > 0 {
				group = r.APIGroups[0]
			}
			sar, err := c.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
				User:               user,
				ResourceAttributes: &authzv1.ResourceAttributes{Verb: r.Verbs[0], Group: group, Resource: resource, Subresource: sub},
			}}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if !sar.Status.Allowed {
				return false
			}
		}
		return true
	})
	cfg := rest.CopyConfig(c.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	return cfg
}

// ControlPlaneUser is the install's control plane as the API server names
// it: ServiceAccount meshdns-controlplane of namespace meshdns-system.
const ControlPlaneUser = "system:serviceaccount:meshdns-system:meshdns-controlplane"

// StartAsControlPlane starts a cluster with RBAC on and returns it with a
// config acting as ControlPlaneUser, granted only the rules of the
// install's ClusterRole (the YAML file at path) that keep selects
// (InstallRules, AsUserWith). want is how many rules the test expects
// keep to select, so a rule the install gains or loses is noticed. Under
// -short the test is skipped: it starts an API server of its own.
func StartAsControlPlane(t testing.TB, path string, want int, keep func(rbacv1.PolicyRule) bool) (*Cluster, *rest.Config) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts an API server of its own (RBAC)")
	}
	c := Start(t, WithRBAC())
	rules := InstallRules(t, path, keep)
	if len(rules) != want {
		t.Fatalf("%d rules of %s for the test, want %d: %v", len(rules), path, want, rules)
	}
	return c, c.AsUserWith(t, ControlPlaneUser, "meshdns-controlplane-test", rules)
}
