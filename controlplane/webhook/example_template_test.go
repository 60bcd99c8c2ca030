package webhook

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// TestExampleTemplate: the ConfigMap users apply parses with the
// webhook's own strict parser and spells out the defaults, so editing it
// starts from what pods get today.
func TestExampleTemplate(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "examples", "kubernetes", "20-inject-template.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cm corev1.ConfigMap
	if err := yaml.UnmarshalStrict(data, &cm); err != nil {
		t.Fatal(err)
	}
	// The base is what --inject-image and --cluster-domain give the
	// control plane.
	got, err := parseTemplate([]byte(cm.Data["template.yaml"]), Template{Image: "example/meshdns:v1", ClusterDomain: "cluster.local"})
	if err != nil {
		t.Fatalf("example template: %v", err)
	}
	// The commands are not spelled out in the example, the image comes from
	// the control plane's --inject-image (set by the install from the one
	// image it names) and the cluster domain from its --cluster-domain;
	// compare the rest.
	want := DefaultTemplate()
	want.Command, want.AgentCommand, want.Image = nil, nil, "example/meshdns:v1"
	if diff := cmp.Diff(want, got, cmpopts.IgnoreUnexported(Template{})); diff != "" {
		t.Errorf("example template differs from the defaults (-default +example):\n%s", diff)
	}
}
