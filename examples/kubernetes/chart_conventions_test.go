package kubernetes_test

import (
	"bytes"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/meshdns/meshdns/controlplane/webhook"
)

// monitoringOn asks for all of monitoring; operatorServed says the
// cluster serves the Prometheus Operator's kinds (helm template cannot ask).
var (
	monitoringOn = []string{"--set", "monitoring.serviceMonitor.enabled=true", "--set", "monitoring.podMonitor.enabled=true",
		"--set", "monitoring.prometheusRule.enabled=true", "--set", "monitoring.dashboard.enabled=true"}
	operatorServed = []string{"--api-versions", "monitoring.coreos.com/v1/ServiceMonitor",
		"--api-versions", "monitoring.coreos.com/v1/PodMonitor", "--api-versions", "monitoring.coreos.com/v1/PrometheusRule"}
	// everything turns on every part of the chart.
	everything = append(append([]string{"--set", "cni.enabled=true", "--set", "vm.enabled=true"}, monitoringOn...), operatorServed...)
)

// clusterScoped are the kinds the chart may render without a namespace.
var clusterScoped = map[string]bool{"ClusterRole": true, "ClusterRoleBinding": true,
	"MutatingWebhookConfiguration": true, "CustomResourceDefinition": true}

// TestChartReleaseNamespace: helm template -n other puts every namespaced
// object in other and renders no Namespace (helm install --create-namespace
// makes it), and every reference to the control plane's namespace says
// other.
func TestChartReleaseNamespace(t *testing.T) {
	lint := append([]string{"lint", "--strict", chartDir, "--namespace", "other", "--set", "cni.enabled=true", "--set", "vm.enabled=true"}, monitoringOn...)
	if out := helm(t, lint...); !bytes.Contains(out, []byte("0 chart(s) failed")) {
		t.Errorf("helm lint with every part on:\n%s", out)
	}
	objs := decodeAll(t, helm(t, append([]string{"template", "x", chartDir, "--namespace", "other", "--include-crds"}, everything...)...))
	kinds := map[string]int{}
	for _, o := range objs {
		kinds[o.GetKind()]++
		switch {
		case clusterScoped[o.GetKind()]:
			if o.GetNamespace() != "" {
				t.Errorf("cluster-scoped %s %s in namespace %s", o.GetKind(), o.GetName(), o.GetNamespace())
			}
		case o.GetNamespace() != "other":
			t.Errorf("%s %s in namespace %q, not the release's", o.GetKind(), o.GetName(), o.GetNamespace())
		}
	}
	for _, k := range []string{"DaemonSet", "ServiceMonitor", "PodMonitor", "PrometheusRule", "CustomResourceDefinition"} {
		if kinds[k] == 0 {
			t.Errorf("no %s rendered: the check above saw less than everything", k)
		}
	}
	m := byName(objs)
	for key, wants := range map[string][]string{
		"ConfigMap other/meshdns-inject":                         {"meshdns-controlplane.other.svc:15012"},
		"Deployment other/meshdns-controlplane":                  {"--webhook-secret=other/meshdns-webhook-certs"},
		"MutatingWebhookConfiguration /meshdns-sidecar-injector": {"namespace: other", "- other\n"},
		"ClusterRoleBinding /meshdns-cni":                        {"namespace: other"},
		"DaemonSet other/meshdns-cni":                            {"--exclude-namespaces=other"},
	} {
		b, _ := yamlOf(m[key])
		for _, w := range wants {
			if !strings.Contains(string(b), w) {
				t.Errorf("%s lacks %q:\n%s", key, w, b)
			}
		}
	}
	// A namespace the chart renders for the control plane and the CNI
	// installer together admits the installer's pods.
	for _, tc := range []struct{ cni, want string }{{"false", "restricted"}, {"true", "privileged"}} {
		ns := byName(withoutKeep(t, decodeAll(t, helm(t, "template", "x", chartDir, "--set", "namespace=apart", "--set", "createNamespace=true",
			"--set", "cni.enabled="+tc.cni))))["Namespace /apart"]
		if got, _, _ := unstructured.NestedString(ns, "metadata", "labels", "pod-security.kubernetes.io/enforce"); got != tc.want {
			t.Errorf("cni.enabled=%s: namespace enforces %q, want %q", tc.cni, got, tc.want)
		}
	}
	// The CRD comes from crds/: helm installs it once and never deletes it.
	if bytes.Contains(helm(t, "template", "x", chartDir), []byte("kind: CustomResourceDefinition")) {
		t.Errorf("the CRD is a template: helm uninstall would delete it and every DNSPolicy")
	}
}

// TestChartSchema: helm refuses values of the wrong kind with a message
// naming the value, at lint, template and install alike (the schema).
func TestChartSchema(t *testing.T) {
	for _, tc := range []struct {
		name, set, want string
	}{
		{name: "replicas not a number", set: "replicas=abc", want: "replicas"},
		{name: "empty image tag", set: "image.tag=", want: "tag"},
		{name: "unknown failure policy", set: "webhook.failurePolicy=Sometimes", want: "failurePolicy"},
		{name: "webhook timeout over 30s", set: "webhook.timeoutSeconds=60", want: "timeoutSeconds"},
		{name: "port out of range", set: "agent.dnsPort=70000", want: "dnsPort"},
		{name: "misspelt value", set: "replica=3", want: "replica"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(helmBinary(t), "template", "x", chartDir, "--set", tc.set)
			dir := t.TempDir()
			cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+dir, "HELM_CACHE_HOME="+dir, "HELM_DATA_HOME="+dir)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("--set %s rendered", tc.set)
			}
			if !strings.Contains(string(out), "schema") || !strings.Contains(string(out), tc.want) {
				t.Errorf("--set %s: the message does not name %s:\n%s", tc.set, tc.want, out)
			}
		})
	}
}

// TestChartKnobs: the values every chart has reach the pods they are for.
func TestChartKnobs(t *testing.T) {
	raw := decodeAll(t, helm(t, "template", "x", chartDir, "-n", "dns", "--set", "cni.enabled=true", "--set", "vm.enabled=true",
		"--set", "nodeSelector.pool=system", "--set", "tolerations[0].key=dedicated", "--set", "tolerations[0].operator=Exists",
		"--set", "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].key=arch",
		"--set", "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator=Exists",
		"--set", "topologySpreadConstraints=null", "--set", "priorityClassName=system-cluster-critical",
		"--set", "imagePullSecrets[0].name=regcred", "--set", "podAnnotations.team=dns", "--set", "podLabels.tier=infra",
		"--set", "extraArgs[0]=--log-level=debug", "--set", "extraEnv[0].name=GODEBUG", "--set", "extraEnv[0].value=http2debug=1",
		"--set", "vm.extraArgs[0]=--log-level=info", "--set", "cni.extraArgs[0]=--capture-all-dns", "--set", "cni.nodeSelector.os=linux",
		"--set", "agent.extraArgs[0]=--log-level=warn", "--set", "agent.extraEnv[0].name=GODEBUG",
		"--set", "agent.extraEnv[0].value=madvdontneed=1", "--set", "agent.extraEnv[1].name=NODE_NAME",
		"--set", "agent.extraEnv[1].valueFrom.fieldRef.fieldPath=spec.nodeName",
		"--set", "webhook.failurePolicy=Fail", "--set", "webhook.timeoutSeconds=3", "--set", "webhook.annotatedPods=false"))
	objs := byName(raw)
	text := func(key string) string {
		b, _ := yamlOf(objs[key])
		return string(b)
	}
	placement := []string{"pool: system", "key: dedicated", "key: arch", "priorityClassName: system-cluster-critical",
		"name: regcred", "team: dns", "tier: infra", "topologyKey: kubernetes.io/hostname"}
	for key, wants := range map[string][]string{
		"Deployment dns/meshdns-controlplane":                    append(placement, "- --log-level=debug", "name: GODEBUG", "--webhook-fail-closed"),
		"Deployment dns/meshdns-controlplane-vm":                 append(slices.Clip(placement[:7]), "- --log-level=info"),
		"DaemonSet dns/meshdns-cni":                              {"name: regcred", "os: linux", "- --capture-all-dns"},
		"MutatingWebhookConfiguration /meshdns-sidecar-injector": {"failurePolicy: Fail", "timeoutSeconds: 3"},
	} {
		for _, w := range wants {
			if !strings.Contains(text(key), w) {
				t.Errorf("%s lacks %q:\n%s", key, w, text(key))
			}
		}
	}
	if hooks, _, _ := unstructured.NestedSlice(objs["MutatingWebhookConfiguration /meshdns-sidecar-injector"], "webhooks"); len(hooks) != 1 {
		t.Errorf("webhook.annotatedPods=false: %d webhook entries, want the namespace one only", len(hooks))
	}
	// The agents' arguments and environment go through the injection template, as the
	// control plane parses it.
	tmpl := injectTemplate(t, raw)
	if diff := cmp.Diff([]string{"--log-level=warn"}, tmpl.AgentArgs); diff != "" {
		t.Errorf("agentArgs (-want +got):\n%s", diff)
	}
	wantEnv := []corev1.EnvVar{{Name: "GODEBUG", Value: "madvdontneed=1"},
		{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}}}
	if diff := cmp.Diff(wantEnv, tmpl.AgentEnv); diff != "" {
		t.Errorf("agentEnv (-want +got):\n%s", diff)
	}
	// topologySpreadConstraints [] is none.
	none := byName(decodeAll(t, helm(t, "template", "x", chartDir, "--set-json", "topologySpreadConstraints=[]")))
	if _, found, _ := unstructured.NestedSlice(none["Deployment default/meshdns-controlplane"], "spec", "template", "spec", "topologySpreadConstraints"); found {
		t.Errorf("topologySpreadConstraints=[] still spreads")
	}
}

// TestChartDisruptionBudget: at one replica the budget allows the eviction
// (a drain never waits on it); at two it keeps one.
func TestChartDisruptionBudget(t *testing.T) {
	for _, tc := range []struct {
		replicas string
		want     map[string]any
	}{
		{"1", map[string]any{"maxUnavailable": float64(1)}},
		{"2", map[string]any{"minAvailable": float64(1)}},
		{"3", map[string]any{"minAvailable": float64(1)}},
	} {
		objs := byName(decodeAll(t, helm(t, "template", "x", chartDir, "--set", "vm.enabled=true",
			"--set", "replicas="+tc.replicas, "--set", "vm.replicas="+tc.replicas)))
		for _, name := range []string{"meshdns-controlplane", "meshdns-controlplane-vm"} {
			spec, _, _ := unstructured.NestedMap(objs["PodDisruptionBudget default/"+name], "spec")
			delete(spec, "selector")
			if diff := cmp.Diff(tc.want, spec); diff != "" {
				t.Errorf("%s at %s replicas (-want +got):\n%s", name, tc.replicas, diff)
			}
		}
	}
	objs := byName(decodeAll(t, helm(t, "template", "x", chartDir, "--set", "podDisruptionBudget.enabled=false")))
	if _, ok := objs["PodDisruptionBudget default/meshdns-controlplane"]; ok {
		t.Errorf("podDisruptionBudget.enabled=false renders one")
	}
}

// injectTemplate is the injection template among objs, parsed as the
// control plane parses it.
func injectTemplate(t *testing.T, objs []*unstructured.Unstructured) webhook.Template {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() != "ConfigMap" || o.GetName() != "meshdns-inject" {
			continue
		}
		data, found, _ := unstructured.NestedString(o.Object, "data", "template.yaml")
		if !found {
			t.Fatal("ConfigMap meshdns-inject has no template.yaml")
		}
		tmpl, err := webhook.ParseTemplate([]byte(data))
		if err != nil {
			t.Fatalf("the injection template does not parse: %v\n%s", err, data)
		}
		return tmpl
	}
	t.Fatal("no ConfigMap meshdns-inject rendered")
	return webhook.Template{}
}
