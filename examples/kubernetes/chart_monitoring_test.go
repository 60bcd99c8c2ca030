package kubernetes_test

import (
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

var monitoringKinds = map[string]bool{"ServiceMonitor": true, "PodMonitor": true, "PrometheusRule": true}

// monitoringObjects are the objects of examples/monitoring among objs: the
// Operator's kinds and the dashboard's ConfigMap.
func monitoringObjects(objs []*unstructured.Unstructured) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if monitoringKinds[o.GetKind()] || o.GetName() == "meshdns-dashboard" {
			out = append(out, o)
		}
	}
	return out
}

// TestChartMonitoring: monitoring.*.enabled renders exactly the objects of
// examples/monitoring (its rules and dashboard, not copies gone stale),
// each only when asked for, the Operator's kinds only where the cluster
// serves them; labels reach them; the NetworkPolicies let Prometheus in
// from networkPolicy.scraperNamespace.
func TestChartMonitoring(t *testing.T) {
	all := decodeAll(t, helm(t, append([]string{"template", "meshdns", chartDir, "-n", "meshdns-system"}, everything...)...))
	if diff := cmp.Diff(byName(renderOnDisk(t, filepath.Join("..", "monitoring"))), byName(monitoringObjects(all))); diff != "" {
		t.Errorf("chart differs from kustomize's examples/monitoring (-kustomize +helm):\n%s", diff)
	}
	kinds := func(set ...string) []string {
		var out []string
		for _, o := range monitoringObjects(decodeAll(t, helm(t, append([]string{"template", "meshdns", chartDir}, set...)...))) {
			out = append(out, o.GetKind())
		}
		sort.Strings(out)
		return out
	}
	if got := kinds(); len(got) != 0 {
		t.Errorf("the defaults render %v", got)
	}
	// Asked for, on a cluster without the Operator: the dashboard only.
	if diff := cmp.Diff([]string{"ConfigMap"}, kinds(monitoringOn...)); diff != "" {
		t.Errorf("without the Operator's CRDs (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"ServiceMonitor"}, kinds("--set", "monitoring.serviceMonitor.enabled=true",
		"--api-versions", "monitoring.coreos.com/v1/ServiceMonitor")); diff != "" {
		t.Errorf("serviceMonitor alone (-want +got):\n%s", diff)
	}

	objs := byName(decodeAll(t, helm(t, append([]string{"template", "meshdns", chartDir, "-n", "dns",
		"--set", "monitoring.serviceMonitor.labels.release=kps", "--set", "monitoring.podMonitor.labels.release=kps",
		"--set", "monitoring.prometheusRule.labels.release=kps", "--set", "networkPolicy.scraperNamespace=observability"}, everything...)...)))
	for _, key := range []string{"ServiceMonitor dns/meshdns-controlplane", "PodMonitor dns/meshdns-agents", "PrometheusRule dns/meshdns"} {
		if l, _, _ := unstructured.NestedString(objs[key], "metadata", "labels", "release"); l != "kps" {
			t.Errorf("%s: label release %q", key, l)
		}
	}
	for _, key := range []string{"NetworkPolicy dns/meshdns-controlplane", "NetworkPolicy dns/meshdns-controlplane-vm"} {
		b, _ := yamlOf(objs[key])
		if !strings.Contains(string(b), "kubernetes.io/metadata.name: observability") || strings.Contains(string(b), "metadata.name: monitoring") {
			t.Errorf("%s does not admit the scraper namespace observability alone:\n%s", key, b)
		}
	}
}

// renderOnDisk builds the kustomization in dir from the tree itself, for
// one that generates a ConfigMap from a file that is not YAML.
func renderOnDisk(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	out, err := res.AsYaml()
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	return decodeAll(t, out)
}
