package kubesource

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

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
// file, as `meshdns controlplane --kubeconfig` does.
func TestNewClientKubeconfig(t *testing.T) {
	c := cluster.Get(t)
	cs, err := NewClient(c.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cs.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
		t.Errorf("get default namespace through the kubeconfig client: %v", err)
	}
}
