package main

import (
	"context"
	"flag"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshdns/meshdns/cmd/internal/cli"
	"github.com/meshdns/meshdns/internal/testkit/kubetest"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

func TestKubeFlagErrors(t *testing.T) {
	// Not in a pod, whatever the machine running the test says.
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	tests := []struct {
		name string
		args []string
		want string
	}{
		{name: "namespaces without an API server", args: []string{"--namespaces", "a"}, want: "--namespaces, --label-selector and the kubernetes plugin options need"},
		{name: "selector without an API server", args: []string{"--label-selector", "a=b"}, want: "--namespaces, --label-selector and the kubernetes plugin options need"},
		{name: "missing kubeconfig file", args: []string{"--kubeconfig", "/nonexistent/kubeconfig"}, want: "kubeconfig /nonexistent/kubeconfig"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"controlplane", "--insecure-allow-unauthenticated", "--entries", "../../examples/entries",
				"--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"}, tt.args...)
			err := cli.Dispatch(context.Background(), args, io.Discard, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// TestControlPlaneWatchesKubernetes runs `meshdns controlplane
// --kubeconfig` against a real API server, with the namespace and the
// selector given through MESHDNS_ variables, and reads the source's
// metrics on the admin port.
func TestControlPlaneWatchesKubernetes(t *testing.T) {
	c := kubetest.Start(t)
	ns := c.Namespace(t, "cmd")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, name := range []string{"web", "hidden"} {
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"dns": name}},
			Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
		}
		if _, err := c.Client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("MESHDNS_NAMESPACES", ns+",kube-system")
	t.Setenv("MESHDNS_LABEL_SELECTOR", "dns=web")

	grpcAddr, adminAddr := testenv.FreeAddr(t), testenv.FreeAddr(t)
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- cli.Dispatch(runCtx, []string{"controlplane", "--kubeconfig", c.Kubeconfig,
			"--grpc-addr", grpcAddr, "--admin-addr", adminAddr, "--log-level", "error"}, io.Discard, io.Discard)
	}()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("controlplane: %v", err)
		}
	})
	metrics := func() string {
		res, err := http.Get("http://" + adminAddr + "/metrics")
		if err != nil {
			return ""
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return string(b)
	}
	waitFor(t, "the Kubernetes source synced with one service", func() bool {
		m := metrics()
		return strings.Contains(m, "meshdns_controlplane_kube_synced 1") && strings.Contains(m, "meshdns_controlplane_kube_entries 1")
	})
	waitFor(t, "ready with only the Kubernetes source", func() bool {
		res, err := http.Get("http://" + adminAddr + "/healthz/ready")
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK
	})
}

func TestKubeFlagsDocumented(t *testing.T) {
	readme, err := os.ReadFile("../../controlplane/kubesource/README.md")
	if err != nil {
		t.Fatal(err)
	}
	fs := flag.NewFlagSet("controlplane", flag.ContinueOnError)
	newKubeFlags(fs)
	fs.VisitAll(func(f *flag.Flag) {
		if !strings.Contains(string(readme), "| `--"+f.Name+"`") {
			t.Errorf("--%s is not in the Configuration table of controlplane/kubesource/README.md", f.Name)
		}
	})
}
