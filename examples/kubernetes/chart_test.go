package kubernetes_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

// chartDir is the Helm chart, beside the kustomize install it mirrors.
var chartDir = filepath.Join("..", "..", "charts", "meshdns")

// helmBinary is the real helm: $HELM, or hack/deps.sh's build in
// ~/.cache/meshdns/helm.
func helmBinary(t *testing.T) string {
	t.Helper()
	if h := os.Getenv("HELM"); h != "" {
		return h
	}
	home, _ := os.UserHomeDir()
	h := filepath.Join(home, ".cache", "meshdns", "helm", "helm")
	if _, err := os.Stat(h); err != nil {
		testenv.Unavailable(t, "needs helm in %s (make deps builds it)", h)
	}
	return h
}

func helm(t *testing.T, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(helmBinary(t), args...)
	// No user configuration or cache leaks in, and nothing is written
	// outside the test.
	dir := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+dir, "HELM_CACHE_HOME="+dir, "HELM_DATA_HOME="+dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.String())
	}
	return out
}

// byName keys objects by kind, namespace and name. A ConfigMap's values
// are files the control plane parses as YAML, so they are compared parsed:
// comments and flow or block style of the same value are not differences.
func byName(objs []*unstructured.Unstructured) map[string]map[string]any {
	m := map[string]map[string]any{}
	for _, o := range objs {
		obj := o.DeepCopy().Object
		if o.GetKind() == "ConfigMap" {
			data, _ := obj["data"].(map[string]any)
			for k, v := range data {
				var parsed any
				if s, ok := v.(string); ok && yaml.Unmarshal([]byte(s), &parsed) == nil {
					data[k] = parsed
				}
			}
		}
		m[o.GetKind()+" "+o.GetNamespace()+"/"+o.GetName()] = obj
	}
	return m
}

func decodeAll(t *testing.T, data []byte) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if err.Error() == "EOF" {
				return objs
			}
			t.Fatalf("decode: %v", err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
}

// keep is the annotation that makes helm uninstall leave an object.
const keep = "helm.sh/resource-policy"

// kustomizeLayout are the values that put the chart's objects where the
// kustomize install puts them: the control plane's namespace rendered (in
// the base it is an object of the install), the CNI installer in a
// namespace of its own (examples/overlays/cni), and the CRD, which helm
// installs from crds/ and helm template prints only when asked.
var kustomizeLayout = []string{"--namespace", "meshdns-system", "--include-crds", "--set", "createNamespace=true",
	"--set", "cni.namespace=meshdns-cni", "--set", "cni.createNamespace=true"}

// withoutKeep checks that every Namespace the chart renders carries the
// annotation helm uninstall leaves it for, and takes it off for the
// comparison with kustomize, which has no use for it.
func withoutKeep(t *testing.T, objs []*unstructured.Unstructured) []*unstructured.Unstructured {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() != "Namespace" {
			continue
		}
		a := o.GetAnnotations()
		if a[keep] != "keep" {
			t.Errorf("namespace %s lacks %s: keep, helm uninstall would delete it with what users keep in it", o.GetName(), keep)
		}
		delete(a, keep)
		if len(a) == 0 {
			a = nil
		}
		o.SetAnnotations(a)
	}
	return objs
}

// TestChartMatchesKustomize: helm lint is clean, and the chart renders
// exactly the objects of the kustomize base and of each overlay (cni.enabled,
// vm.enabled), with the defaults and with an image tag set in both, when
// its values lay it out as kustomize does.
func TestChartMatchesKustomize(t *testing.T) {
	if out := helm(t, "lint", "--strict", chartDir); !bytes.Contains(out, []byte("0 chart(s) failed")) {
		t.Errorf("helm lint:\n%s", out)
	}
	for _, tc := range []struct {
		name, tag string
		dir       string // what kustomize renders, under examples/
		set       []string
	}{
		{name: "defaults", dir: "kubernetes"},
		{name: "image tag", dir: "kubernetes", tag: "v1.2.3", set: []string{"--set", "image.tag=v1.2.3"}},
		{name: "CNI overlay", dir: "overlays/cni", set: []string{"--set", "cni.enabled=true"}},
		{name: "CNI overlay, image tag", dir: "overlays/cni", tag: "v1.2.3", set: []string{"--set", "cni.enabled=true", "--set", "image.tag=v1.2.3"}},
		{name: "VM overlay", dir: "overlays/vm", set: []string{"--set", "vm.enabled=true"}},
		{name: "VM overlay, image tag", dir: "overlays/vm", tag: "v1.2.3", set: []string{"--set", "vm.enabled=true", "--set", "image.tag=v1.2.3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if len(tc.set) > 0 {
				if out := helm(t, append([]string{"lint", "--strict", chartDir}, tc.set...)...); !bytes.Contains(out, []byte("0 chart(s) failed")) {
					t.Errorf("helm lint %s:\n%s", strings.Join(tc.set, " "), out)
				}
			}
			set := append(append([]string{}, kustomizeLayout...), tc.set...)
			chart := withoutKeep(t, decodeAll(t, helm(t, append([]string{"template", "meshdns", chartDir}, set...)...)))
			base := render(t, tc.dir, tc.tag)
			if diff := cmp.Diff(byName(base), byName(chart)); diff != "" {
				t.Errorf("chart differs from kustomize's examples/%s (-kustomize +helm):\n%s", tc.dir, diff)
				return
			}
			t.Logf("examples/%s and helm template %s: the same %d objects", tc.dir, strings.Join(tc.set, " "), len(chart))
		})
	}
}

// TestChartValues: each value reaches the objects it stands for.
func TestChartValues(t *testing.T) {
	entries := filepath.Join(t.TempDir(), "corp.yaml")
	if err := os.WriteFile(entries, []byte("entries:\n  - {hostname: db.corp.example, addresses: [10.0.0.1]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	objs := byName(decodeAll(t, helm(t, "template", "meshdns", chartDir, "--set", "namespace=dns", "--set", "replicas=3",
		"--set", "clusterDomain=corp.local", "--set", "cni.enabled=true", "--set", "agent.dnsPort=16053",
		"--set", "monitoring.scrapeAnnotations=false", "--set-file", "entries="+entries)))
	d := unstructured.Unstructured{Object: objs["Deployment dns/meshdns-controlplane"]}
	if d.Object == nil {
		t.Fatalf("no Deployment in namespace dns; objects: %v", keysOf(objs))
	}
	if r, _, _ := unstructured.NestedFieldNoCopy(d.Object, "spec", "replicas"); r != float64(3) {
		t.Errorf("replicas %v", r)
	}
	text := func(key string) string {
		b, _ := yamlOf(objs[key])
		return string(b)
	}
	for key, wants := range map[string][]string{
		"Deployment dns/meshdns-controlplane":                    {"--cluster-domain=corp.local", "--webhook-secret=dns/meshdns-webhook-certs"},
		"ConfigMap dns/meshdns-inject":                           {"cni: true", "dnsPort: 16053", "meshdns-controlplane.dns.svc:15012"},
		"ConfigMap dns/meshdns-entries":                          {"db.corp.example"},
		"MutatingWebhookConfiguration /meshdns-sidecar-injector": {"namespace: dns"},
		"ClusterRoleBinding /meshdns-controlplane":               {"namespace: dns"},
	} {
		for _, w := range wants {
			if !strings.Contains(text(key), w) {
				t.Errorf("%s lacks %q:\n%s", key, w, text(key))
			}
		}
	}
	if s := text("Deployment dns/meshdns-controlplane"); strings.Contains(s, "prometheus.io/scrape") {
		t.Errorf("scrape annotations with monitoring.scrapeAnnotations=false")
	}
	if s := text("MutatingWebhookConfiguration /meshdns-sidecar-injector"); strings.Contains(s, "pod-security.kubernetes.io/enforce") {
		t.Errorf("CNI mode keeps the Pod Security exclusion")
	}
}

// TestChartOverlayValues: the values of the CNI DaemonSet and of the VM
// control plane reach their objects.
func TestChartOverlayValues(t *testing.T) {
	objs := byName(decodeAll(t, helm(t, "template", "meshdns", chartDir, "--set", "namespace=dns", "--set", "clusterDomain=corp.local",
		"--set", "cni.enabled=true", "--set", "cni.binDir=/home/kubernetes/bin", "--set", "cni.confDir=/etc/cni/conf.d",
		"--set", "vm.enabled=true", "--set", "vm.replicas=3", "--set", "vm.tlsSecret=vm-certs", "--set", "vm.serviceType=NodePort",
		"--set", "vm.maxConnectionsPerPeer=50")))
	for key, wants := range map[string][]string{
		"DaemonSet dns/meshdns-cni":                   {"path: /home/kubernetes/bin", "path: /etc/cni/conf.d", "--host-conf-dir=/etc/cni/conf.d", "--exclude-namespaces=dns"},
		"Deployment dns/meshdns-controlplane-vm":      {"replicas: 3", "secretName: vm-certs", "--max-connections-per-peer=50", "--cluster-domain=corp.local"},
		"Service dns/meshdns-controlplane-vm":         {"type: NodePort"},
		"ClusterRoleBinding /meshdns-controlplane-vm": {"namespace: dns"},
	} {
		b, _ := yamlOf(objs[key])
		for _, w := range wants {
			if !strings.Contains(string(b), w) {
				t.Errorf("%s lacks %q:\n%s", key, w, b)
			}
		}
	}
}

func yamlOf(o map[string]any) ([]byte, error) { return yaml.Marshal(o) }

func keysOf(m map[string]map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
