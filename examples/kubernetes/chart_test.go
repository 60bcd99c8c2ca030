package kubernetes_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/meshdns/meshdns/internal/kubetest"
	"github.com/meshdns/meshdns/internal/testenv"
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

// TestChartMatchesKustomize: helm lint is clean, and the chart renders
// exactly the objects of the kustomize base and of each overlay (cni.enabled,
// vm.enabled), with the defaults and with an image tag set in both.
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
			chart := decodeAll(t, helm(t, append([]string{"template", "meshdns", chartDir}, tc.set...)...))
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
		"DaemonSet meshdns-cni/meshdns-cni":           {"path: /home/kubernetes/bin", "path: /etc/cni/conf.d", "--host-conf-dir=/etc/cni/conf.d"},
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

// TestChartInstall installs, upgrades and uninstalls the chart with the
// real helm against a real API server. The upgrade keeps the caBundle the
// control plane wrote (helm's three-way merge leaves fields it never set).
func TestChartInstall(t *testing.T) {
	helmBinary(t) // before the API server starts
	kc := kubetest.Start(t)
	ctx := context.Background()
	kube := []string{"--kubeconfig", kc.Kubeconfig, "--namespace", "default"}
	helm(t, append([]string{"install", "meshdns", chartDir}, kube...)...)
	image := func() string {
		d, err := kc.Client.AppsV1().Deployments("meshdns-system").Get(ctx, "meshdns-controlplane", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return d.Spec.Template.Spec.Containers[0].Image
	}
	if got := image(); got != repo+":v0.1.0" {
		t.Errorf("installed image %s", got)
	}
	hooks := kc.Client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	hook, err := hooks.Get(ctx, "meshdns-sidecar-injector", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hook.Webhooks[0].ClientConfig.CABundle = []byte("-----BEGIN CERTIFICATE-----\nstand-in\n-----END CERTIFICATE-----\n")
	if _, err := hooks.Update(ctx, hook, metav1.UpdateOptions{FieldManager: "meshdns-controlplane"}); err != nil {
		t.Fatal(err)
	}

	// The upgrade also turns both overlays' values on: the API server
	// takes the DaemonSet, its namespace and the VM control plane.
	helm(t, append([]string{"upgrade", "meshdns", chartDir, "--set", "image.tag=v0.2.0", "--set", "cni.enabled=true", "--set", "vm.enabled=true"}, kube...)...)
	if got := image(); got != repo+":v0.2.0" {
		t.Errorf("upgraded image %s", got)
	}
	if ds, err := kc.Client.AppsV1().DaemonSets("meshdns-cni").Get(ctx, "meshdns-cni", metav1.GetOptions{}); err != nil || ds.Spec.Template.Spec.Containers[0].Image != repo+":v0.2.0" {
		t.Errorf("CNI DaemonSet after the upgrade: %v", err)
	}
	if _, err := kc.Client.AppsV1().Deployments("meshdns-system").Get(ctx, "meshdns-controlplane-vm", metav1.GetOptions{}); err != nil {
		t.Errorf("VM control plane after the upgrade: %v", err)
	}
	if hook, err = hooks.Get(ctx, "meshdns-sidecar-injector", metav1.GetOptions{}); err != nil || len(hook.Webhooks[0].ClientConfig.CABundle) == 0 {
		t.Errorf("the upgrade emptied the caBundle the control plane wrote (err %v)", err)
	}

	helm(t, append([]string{"uninstall", "meshdns"}, kube...)...)
	if _, err := hooks.Get(ctx, "meshdns-sidecar-injector", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("webhook configuration after uninstall: %v", err)
	}
	for _, role := range []string{"meshdns-controlplane", "meshdns-cni", "meshdns-controlplane-vm"} {
		if _, err := kc.Client.RbacV1().ClusterRoles().Get(ctx, role, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("cluster role %s after uninstall: %v", role, err)
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
