package kubetest

import (
	"context"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PodOnNode creates a node labelled nodeLabels (named node-<random
// suffix>, deleted in t.Cleanup) and a pod named pod in ns on it, run as
// the namespace's default ServiceAccount, and returns the node's name and
// a token for audience bound to the pod, as the kubelet projects one: its
// claims name the pod and its node.
func (c *Cluster) PodOnNode(t testing.TB, ns, pod string, nodeLabels map[string]string, audience string) (node, token string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nodes := c.Client.CoreV1().Nodes()
	n, err := nodes.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{GenerateName: "node-", Labels: nodeLabels}},
		metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create node: %v", err)
	}
	t.Cleanup(func() {
		if !c.stopped {
			_ = nodes.Delete(context.Background(), n.Name, metav1.DeleteOptions{})
		}
	})
	p, err := c.Client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: pod},
		Spec: corev1.PodSpec{ServiceAccountName: "default", NodeName: n.Name,
			Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod: %v", err)
	}
	expiry := int64(3600)
	tr, err := c.Client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "default", &authv1.TokenRequest{Spec: authv1.TokenRequestSpec{
		Audiences: []string{audience}, ExpirationSeconds: &expiry,
		BoundObjectRef: &authv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: p.Name, UID: p.UID},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token request: %v", err)
	}
	return n.Name, tr.Status.Token
}
