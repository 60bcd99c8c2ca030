package main

import (
	"context"
	"flag"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshdns/meshdns/cmd/internal/cli"
	"github.com/meshdns/meshdns/controlplane/kubesource"
	"github.com/meshdns/meshdns/internal/testkit/kubetest"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

func TestKubeOptionFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		want    kubesource.Options
		wantErr string
	}{
		{name: "none"},
		{
			name: "all",
			args: []string{"--namespace-labels", "dns=on", "--endpoint-pod-names", "--ignore-empty-service",
				"--noendpoints", "--fallthrough", "--startup-timeout", "5s"},
			want: kubesource.Options{NamespaceLabels: "dns=on", EndpointPodNames: true, IgnoreEmptyService: true,
				NoEndpoints: true, Fallthrough: true, StartupTimeout: 5 * time.Second},
		},
		{name: "fallthrough the cluster domain", args: []string{"--fallthrough=Cluster.Local."}, want: kubesource.Options{Fallthrough: true}},
		{name: "fallthrough a parent", args: []string{"--fallthrough=local,in-addr.arpa"}, want: kubesource.Options{Fallthrough: true}},
		{name: "fallthrough reverse zones only", args: []string{"--fallthrough=in-addr.arpa,ip6.arpa"}},
		{name: "fallthrough false", args: []string{"--fallthrough=false"}},
		{name: "fallthrough part of the domain", args: []string{"--fallthrough=shared.cluster.local"}, wantErr: "only the whole cluster domain"},
		{name: "fallthrough elsewhere", args: []string{"--fallthrough=example.org"}, wantErr: "not a zone of the Kubernetes source"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := flag.NewFlagSet("controlplane", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			f := newKubeOptionFlags(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			if got := f.set(); got != (len(tt.args) > 0 && tt.name != "fallthrough false") {
				t.Errorf("set() = %v", got)
			}
			got, err := f.options("cluster.local")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("options (-want +got):\n%s", diff)
			}
		})
	}
}

// TestControlPlaneKubeOptions runs `meshdns controlplane` with the plugin
// option flags against a real API server and reads, on the admin port,
// how many services the source kept: only the one of a labelled
// namespace that has a ready endpoint.
func TestControlPlaneKubeOptions(t *testing.T) {
	c := kubetest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	exposed, hidden := c.Namespace(t, "opts-on"), c.Namespace(t, "opts-off")
	n, err := c.Client.CoreV1().Namespaces().Get(ctx, exposed, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Labels = map[string]string{"dns": "on"}
	if _, err := c.Client.CoreV1().Namespaces().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []struct{ ns, name string }{{exposed, "web"}, {exposed, "empty"}, {hidden, "web"}} {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: s.name},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}
		if _, err := c.Client.CoreV1().Services(s.ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ready := true
	for _, ns := range []string{exposed, hidden} {
		if _, err := c.Client.DiscoveryV1().EndpointSlices(ns).Create(ctx, &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: "web-1", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1"}, Conditions: discoveryv1.EndpointConditions{Ready: &ready},
				TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: "web-0"}}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	grpcAddr, adminAddr := testenv.FreeAddr(t), testenv.FreeAddr(t)
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- cli.Dispatch(runCtx, []string{"controlplane", "--kubeconfig", c.Kubeconfig,
			"--grpc-addr", grpcAddr, "--admin-addr", adminAddr, "--log-level", "error",
			"--namespace-labels", "dns=on", "--ignore-empty-service", "--endpoint-pod-names",
			"--fallthrough", "--startup-timeout", "30s"}, io.Discard, io.Discard)
	}()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("controlplane: %v", err)
		}
	})
	waitFor(t, "the Kubernetes source synced with one service", func() bool {
		res, err := http.Get("http://" + adminAddr + "/metrics")
		if err != nil {
			return false
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		m := string(b)
		return strings.Contains(m, "meshdns_controlplane_kube_synced 1") && strings.Contains(m, "meshdns_controlplane_kube_entries 1")
	})
}
