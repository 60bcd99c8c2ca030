package kubesource

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestRESTConfigOff(t *testing.T) {
	tests := []struct {
		name       string
		host, port string
		wantNil    bool
		wantErr    bool
	}{
		{name: "no kubeconfig, not in a pod: off", wantNil: true},
		{name: "only the host variable: not in a pod", host: "10.96.0.1", wantNil: true},
		// The service variables say "pod", but this machine has no
		// service account token: an error, not a silent "off".
		{name: "pod without a service account token", host: "10.96.0.1", port: "443", wantNil: true, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := os.Stat("/var/run/secrets/kubernetes.io/serviceaccount/token"); err == nil {
				t.Skip("running in a pod")
			}
			t.Setenv("KUBERNETES_SERVICE_HOST", tt.host)
			t.Setenv("KUBERNETES_SERVICE_PORT", tt.port)
			cfg, err := RESTConfig("")
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if (cfg == nil) != tt.wantNil {
				t.Errorf("config = %v, want nil %v", cfg, tt.wantNil)
			}
		})
	}
}

func TestRESTConfigMissingFile(t *testing.T) {
	if _, err := RESTConfig(filepath.Join(t.TempDir(), "nope")); err == nil {
		t.Error("RESTConfig(missing file) = nil error")
	}
}

// TestNewClientKubeconfig reaches the real API server through a kubeconfig
// file, as `meshdns controlplane --kubeconfig` does, and checks that both
// API groups decode into their typed lists, label selector applied.
func TestNewClientKubeconfig(t *testing.T) {
	c := cluster.Get(t)
	ns := c.Namespace(t, "kubeconfig")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Client.CoreV1().Services(ns).Create(ctx, clusterIPService(ns, "web"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*discoveryv1.EndpointSlice{
		slice(ns, "db-1", "db", discoveryv1.AddressTypeIPv4, ep{addrs: []string{"10.1.0.2"}}),
		slice(ns, "db-2", "other", discoveryv1.AddressTypeIPv4, ep{addrs: []string{"10.1.0.3"}}),
	} {
		if _, err := c.Client.DiscoveryV1().EndpointSlices(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	client, err := NewClient(c.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	obj, err := client.Services(ns).List(metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list services through the kubeconfig client: %v", err)
	}
	svcs, ok := obj.(*corev1.ServiceList)
	if !ok {
		t.Fatalf("services list is a %T, want *v1.ServiceList", obj)
	}
	if len(svcs.Items) != 1 || svcs.Items[0].Name != "web" || svcs.Items[0].Spec.Ports[0].Name != "http" {
		t.Errorf("services = %+v, want web with its http port", svcs.Items)
	}
	obj, err = client.EndpointSlices(ns).List(metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=db"})
	if err != nil {
		t.Fatalf("list endpointslices through the kubeconfig client: %v", err)
	}
	eps, ok := obj.(*discoveryv1.EndpointSliceList)
	if !ok {
		t.Fatalf("endpointslices list is a %T, want *v1.EndpointSliceList", obj)
	}
	if len(eps.Items) != 1 || eps.Items[0].Name != "db-1" || eps.Items[0].Endpoints[0].Addresses[0] != "10.1.0.2" {
		t.Errorf("endpointslices = %+v, want only db-1 with 10.1.0.2", eps.Items)
	}
}
