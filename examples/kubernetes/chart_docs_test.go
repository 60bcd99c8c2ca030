package kubernetes_test

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

var egressExample = regexp.MustCompile("(?s)## Namespaces with default-deny egress\n.*?```yaml\n(.*?)```")

// TestChartEgressDocs: the NetworkPolicy the chart's README gives namespaces
// with default-deny egress is a valid object that lets the agents reach the
// control plane's pods on their gRPC port, and Prometheus reach the agents'
// probe port, as the chart installs them with its defaults.
func TestChartEgressDocs(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(chartDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := egressExample.FindSubmatch(data)
	if m == nil {
		t.Fatal("README.md has no yaml example under \"## Namespaces with default-deny egress\"")
	}
	var np networkingv1.NetworkPolicy
	if err := yaml.UnmarshalStrict(m[1], &np); err != nil {
		t.Fatalf("the example is no NetworkPolicy: %v", err)
	}
	raw := decodeAll(t, helm(t, "template", "meshdns", chartDir, "-n", "meshdns-system"))
	objs := byName(raw)
	d := objs["Deployment meshdns-system/meshdns-controlplane"]
	podLabels, _, _ := unstructured.NestedStringMap(d, "spec", "template", "metadata", "labels")
	containers, _, _ := unstructured.NestedSlice(d, "spec", "template", "spec", "containers")
	var grpc int64
	ports, _, _ := unstructured.NestedSlice(containers[0].(map[string]any), "ports")
	for _, p := range ports {
		if p := p.(map[string]any); p["name"] == "grpc" {
			grpc = int64(p["containerPort"].(float64))
		}
	}
	tmpl := injectTemplate(t, raw)

	if len(np.Spec.Egress) != 1 || len(np.Spec.Egress[0].To) != 1 || len(np.Spec.Egress[0].Ports) != 1 {
		t.Fatalf("egress: want one rule to the control plane's pods on one port, got %+v", np.Spec.Egress)
	}
	to, port := np.Spec.Egress[0].To[0], np.Spec.Egress[0].Ports[0]
	if to.NamespaceSelector == nil || to.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "meshdns-system" {
		t.Errorf("egress: not to the control plane's namespace: %+v", to.NamespaceSelector)
	}
	if to.PodSelector == nil || len(to.PodSelector.MatchLabels) == 0 {
		t.Errorf("egress: to every pod of the namespace, not the control plane's")
	} else {
		for k, v := range to.PodSelector.MatchLabels {
			if podLabels[k] != v {
				t.Errorf("egress: selects %s=%s, which the control plane's pods (%v) lack", k, v, podLabels)
			}
		}
	}
	if port.Port == nil || int64(port.Port.IntValue()) != grpc {
		t.Errorf("egress port %v, the control plane's gRPC port is %d", port.Port, grpc)
	}
	if len(np.Spec.Ingress) != 1 || len(np.Spec.Ingress[0].Ports) != 1 || int32(np.Spec.Ingress[0].Ports[0].Port.IntValue()) != tmpl.ProbePort {
		t.Errorf("ingress: want the agent's probe port %d, got %+v", tmpl.ProbePort, np.Spec.Ingress)
	}
}
