package main

import (
	"context"
	"encoding/base64"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshdns/meshdns/cmd/internal/cli"
	"github.com/meshdns/meshdns/internal/testkit/kubetest"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

// TestSecureStream runs the secure default end to end against a real API
// server: the control plane makes its CA and serves gRPC over TLS with it
// (--webhook-secret, --grpc-self-signed), a real agent trusts that CA and
// presents a pod-bound ServiceAccount token from the TokenRequest API; it
// gets its namespace's names and not another namespace's. The same token
// claiming the other namespace is refused and counted.
func TestSecureStream(t *testing.T) {
	c := kubetest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sys, nsA, nsB := c.Namespace(t, "meshdns"), c.Namespace(t, "team-a"), c.Namespace(t, "team-b")
	for ns, name := range map[string]string{nsA: "only-a", nsB: "only-b"} {
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{"meshdns.io/export-to": ns}},
			Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
		}
		if _, err := c.Client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pod, err := c.Client.CoreV1().Pods(nsA).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-0"},
		Spec:       corev1.PodSpec{ServiceAccountName: "default", Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := c.Client.CoreV1().ServiceAccounts(nsA).CreateToken(ctx, "default", &authv1.TokenRequest{Spec: authv1.TokenRequestSpec{
		Audiences:      []string{"meshdns"},
		BoundObjectRef: &authv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(tr.Status.Token), 0o600); err != nil {
		t.Fatal(err)
	}

	grpcAddr, cpAdmin, webhookAddr := testenv.FreeAddr(t), testenv.FreeAddr(t), testenv.FreeAddr(t)
	var wg sync.WaitGroup
	start := func(name string, args ...string) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if code := cli.Run(ctx, args, io.Discard, io.Discard); code != 0 && ctx.Err() == nil {
				t.Errorf("%s exited with %d", name, code)
			}
		}()
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
	start("controlplane", "controlplane", "--kubeconfig", c.Kubeconfig, "--grpc-addr", grpcAddr, "--grpc-self-signed",
		"--admin-addr", cpAdmin, "--webhook-addr", webhookAddr, "--webhook-secret", sys+"/meshdns-webhook-certs",
		"--webhook-dns-names", "127.0.0.1", "--webhook-configs", "", "--debounce", "10ms", "--log-level", "error")

	// The CA through kubectl, not client-go: the control plane in this
	// process set klog's logger, which client-go reads on every request.
	kubectl := filepath.Join(testenv.KubeAssets(t), "kubectl")
	var ca []byte
	waitFor(t, "the control plane's CA in its Secret", func() bool {
		out, err := exec.Command(kubectl, "--kubeconfig", c.Kubeconfig, "-n", sys, "get", "secret", "meshdns-webhook-certs",
			"-o", `jsonpath={.data.ca\.crt}`).Output()
		if err != nil || len(out) == 0 {
			return false
		}
		ca, err = base64.StdEncoding.DecodeString(string(out))
		return err == nil
	})
	caFile := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(caFile, ca, 0o644); err != nil {
		t.Fatal(err)
	}
	agent := func(namespace string) string {
		admin := testenv.FreeAddr(t)
		start("agent "+namespace, "agent", "--control-plane", grpcAddr, "--ca-cert", caFile, "--token-file", tokenFile,
			"--namespace", namespace, "--pod-name", "web-0", "--resolv-conf", "../../examples/resolv.conf",
			"--upstream", "127.0.0.1", "--dns-addr", testenv.FreeAddr(t), "--admin-addr", admin, "--log-level", "error")
		return "http://" + admin
	}
	get := func(url string) (int, string) {
		res, err := http.Get(url)
		if err != nil {
			return 0, ""
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}

	a := agent(nsA)
	waitFor(t, "the agent with its token ready", func() bool {
		code, _ := get(a + "/healthz/ready")
		return code == http.StatusOK
	})
	_, table := get(a + "/debug/nametable")
	if !strings.Contains(table, "only-a."+nsA+".svc.cluster.local") || strings.Contains(table, "only-b."+nsB) {
		t.Errorf("team-a's table should hold only-a and not only-b:\n%.2000s", table)
	}

	agent(nsB) // team-a's token, claiming team-b
	waitFor(t, "the claim of another namespace refused and counted", func() bool {
		_, m := get("http://" + cpAdmin + "/metrics")
		return strings.Contains(m, `meshdns_controlplane_stream_admissions_total{method="token",result="denied"} `) &&
			!strings.Contains(m, `meshdns_controlplane_stream_admissions_total{method="token",result="denied"} 0`)
	})
}
