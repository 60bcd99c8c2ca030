// Tests of the monitoring kustomization: promtool checks and unit-tests
// the alert rules, every metric and label the rules and the dashboard read
// is checked against what the agent and the control plane register, and
// the monitors are checked against the ports the install and the injector
// really use.
package monitoring_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/meshdns/meshdns/controlplane/webhook"
	"github.com/meshdns/meshdns/internal/testkit/kustomizetest"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

// ruleGroups returns the PrometheusRule's spec: the rule file promtool
// reads.
func ruleGroups(t *testing.T) map[string]any {
	t.Helper()
	data, err := os.ReadFile("prometheusrule.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var pr struct {
		APIVersion string         `json:"apiVersion"`
		Kind       string         `json:"kind"`
		Metadata   map[string]any `json:"metadata"`
		Spec       map[string]any `json:"spec"`
	}
	if err := yaml.UnmarshalStrict(data, &pr); err != nil {
		t.Fatalf("prometheusrule.yaml: %v", err)
	}
	if pr.Kind != "PrometheusRule" || pr.Spec["groups"] == nil {
		t.Fatalf("prometheusrule.yaml: kind %q, groups %v", pr.Kind, pr.Spec["groups"])
	}
	return pr.Spec
}

// TestPromtool runs the real promtool on the rules: `check rules` (syntax,
// PromQL, templates) and `test rules` with rules_test.yaml, which says for
// every alert which series fire it and which must not.
func TestPromtool(t *testing.T) {
	promtool := testenv.RequireTool(t, "promtool")
	dir := t.TempDir()
	rules, err := yaml.Marshal(ruleGroups(t))
	if err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile("rules_test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"rules.yaml": rules, "rules_test.yaml": tests} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{{"check", "rules", "rules.yaml"}, {"test", "rules", "rules_test.yaml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// TestEveryAlertTested checks that rules_test.yaml has, for every alert,
// a case where it fires and one where it does not.
func TestEveryAlertTested(t *testing.T) {
	data, err := os.ReadFile("rules_test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Tests []struct {
			Alerts []struct {
				Name   string `json:"alertname"`
				Alerts []any  `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	if err := yaml.Unmarshal(data, &file); err != nil {
		t.Fatal(err)
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range file.Tests {
		for _, a := range tc.Alerts {
			if len(a.Alerts) > 0 {
				fires[a.Name] = true
			} else {
				quiet[a.Name] = true
			}
		}
	}
	for _, a := range alerts(t) {
		if !fires[a.name] || !quiet[a.name] {
			t.Errorf("alert %s: a case that fires it: %v, one that does not: %v", a.name, fires[a.name], quiet[a.name])
		}
	}
}

type alert struct{ name, expr string }

func alerts(t *testing.T) []alert {
	t.Helper()
	data, err := json.Marshal(ruleGroups(t)["groups"])
	if err != nil {
		t.Fatal(err)
	}
	var groups []struct {
		Rules []struct {
			Alert string `json:"alert"`
			Expr  string `json:"expr"`
		} `json:"rules"`
	}
	if err := json.Unmarshal(data, &groups); err != nil {
		t.Fatal(err)
	}
	var out []alert
	for _, g := range groups {
		for _, r := range g.Rules {
			out = append(out, alert{r.Alert, r.Expr})
		}
	}
	return out
}

// queries returns every PromQL expression of the rules and the dashboard,
// keyed by where it is.
func queries(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, a := range alerts(t) {
		out["alert "+a.name] = a.expr
	}
	data, err := os.ReadFile("dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("dashboard.json: %v", err)
	}
	for _, p := range dash.Panels {
		for i, tg := range p.Targets {
			out["panel "+p.Title+" "+string(rune('A'+i))] = tg.Expr
		}
	}
	for _, v := range dash.Templating.List {
		if q, ok := v.Query.(map[string]any); ok {
			out["variable "+v.Name] = q["query"].(string)
		}
	}
	if len(dash.Panels) == 0 {
		t.Fatal("dashboard.json has no panels")
	}
	return out
}

// targetLabels are the labels Prometheus gives every series of a
// ServiceMonitor's or PodMonitor's targets.
var targetLabels = []string{"namespace", "pod", "container", "service", "endpoint", "job", "instance"}

// labelValues is Grafana's label_values(metric, label).
var labelValues = regexp.MustCompile(`^label_values\((\w+),\s*(\w+)\)$`)

// TestMetricsExist checks every metric the rules and the dashboard read
// against the families the agent and the control plane register (built
// as the binaries build them), and every label name they match on or
// group by against those families' labels and the scrape's target labels.
// An unknown name fails: a query on a metric that does not exist is
// silently empty, and an alert on it never fires.
func TestMetricsExist(t *testing.T) {
	fams := controlPlaneFamilies(t)
	// up is Prometheus's own: 1 when a target's scrape worked.
	fams["up"] = family{labels: map[string]bool{}}
	for name, f := range agentFamilies(t) {
		if cp, ok := fams[name]; ok && cp.labels != nil { // go_* and process_*: the agent writes client_golang's
			f.labels = cp.labels
		}
		fams[name] = f
	}
	used := 0
	for where, expr := range queries(t) {
		var sels []selector
		var grouping []string
		if m := labelValues.FindStringSubmatch(expr); m != nil {
			sels, grouping = []selector{{metric: m[1]}}, []string{m[2]}
		} else {
			var err error
			if sels, grouping, err = exprRefs(expr); err != nil {
				t.Errorf("%s: %v", where, err)
				continue
			}
		}
		if len(sels) == 0 && !strings.Contains(expr, "vector(") {
			t.Errorf("%s: reads no metric: %q", where, expr)
		}
		known := slices.Clone(targetLabels)
		for _, s := range sels {
			f, extra, ok := lookup(fams, s.metric)
			if !ok {
				t.Errorf("%s: metric %s is registered by neither the agent nor the control plane", where, s.metric)
				continue
			}
			used++
			if f.labels == nil {
				t.Errorf("%s: labels of %s unknown", where, s.metric)
				continue
			}
			for _, l := range s.labels {
				if !f.labels[l] && !slices.Contains(targetLabels, l) && l != extra {
					t.Errorf("%s: %s has no label %s (%s)", where, s.metric, l, f)
				}
			}
			for l := range f.labels {
				known = append(known, l)
			}
			if extra != "" {
				known = append(known, extra)
			}
		}
		for _, l := range grouping {
			if !slices.Contains(known, l) {
				t.Errorf("%s: groups by %s, which none of its metrics has", where, l)
			}
		}
	}
	if used == 0 {
		t.Fatal("no metric checked")
	}
}

// lookup finds the family a series name belongs to: the name itself, or a
// histogram's _bucket (which adds the label le), _sum or _count.
func lookup(fams map[string]family, name string) (family, string, bool) {
	if f, ok := fams[name]; ok {
		return f, "", true
	}
	if base, ok := strings.CutSuffix(name, "_bucket"); ok {
		f, ok := fams[base]
		return f, "le", ok && f.buckets
	}
	for _, suffix := range []string{"_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			f, ok := fams[base]
			return f, "", ok && f.histogram
		}
	}
	return family{}, "", false
}

// TestKustomization renders the kustomization as kubectl apply -k does
// and checks the monitors against the install: the ServiceMonitor selects
// the control plane's Service by its labels and names its metrics port;
// the PodMonitor names the port the injector gives the agent sidecar.
func TestKustomization(t *testing.T) {
	// Built from the disk: kustomizetest's copy holds only YAML files,
	// and this one reads dashboard.json.
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), ".")
	if err != nil {
		t.Fatalf("kustomize build: %v", err)
	}
	out, err := res.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	objs := kustomizetest.Decode(t, out)
	byKind := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		if o.GetNamespace() != "meshdns-system" {
			t.Errorf("%s/%s in namespace %q, want meshdns-system", o.GetKind(), o.GetName(), o.GetNamespace())
		}
		byKind[o.GetKind()] = o
	}
	var kinds []string
	for k := range byKind {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	if want := []string{"ConfigMap", "PodMonitor", "PrometheusRule", "ServiceMonitor"}; !slices.Equal(kinds, want) {
		t.Fatalf("kinds %v, want %v", kinds, want)
	}

	// The base install needs no Prometheus Operator CRD.
	for _, o := range kustomizetest.Render(t, "..", "kubernetes", nil) {
		if strings.HasPrefix(o.GetAPIVersion(), "monitoring.coreos.com/") {
			t.Errorf("the base install has %s/%s", o.GetKind(), o.GetName())
		}
		if o.GetKind() != "Service" || o.GetName() != "meshdns-controlplane" {
			continue
		}
		sel, _, _ := unstructured.NestedStringMap(byKind["ServiceMonitor"].Object, "spec", "selector", "matchLabels")
		for k, v := range sel {
			if o.GetLabels()[k] != v {
				t.Errorf("ServiceMonitor selects %s=%s; the Service's labels are %v", k, v, o.GetLabels())
			}
		}
		eps, _, _ := unstructured.NestedSlice(byKind["ServiceMonitor"].Object, "spec", "endpoints")
		ports, _, _ := unstructured.NestedSlice(o.Object, "spec", "ports")
		if len(eps) != 1 || !slices.ContainsFunc(ports, func(p any) bool { return p.(map[string]any)["name"] == eps[0].(map[string]any)["port"] }) {
			t.Errorf("ServiceMonitor endpoints %v; the Service's ports are %v", eps, ports)
		}
	}

	eps, _, _ := unstructured.NestedSlice(byKind["PodMonitor"].Object, "spec", "podMetricsEndpoints")
	if len(eps) != 1 {
		t.Fatalf("PodMonitor endpoints %v", eps)
	}
	if got, want := eps[0].(map[string]any)["port"], agentProbePort(t); got != want.Name {
		t.Errorf("PodMonitor port %v; the injected agent's probe port is %+v", got, want)
	}

	dash, err := os.ReadFile("dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	cm := byKind["ConfigMap"]
	if got, _, _ := unstructured.NestedString(cm.Object, "data", "meshdns.json"); got != string(dash) {
		t.Error("the dashboard ConfigMap does not hold dashboard.json")
	}
	if cm.GetLabels()["grafana_dashboard"] != "1" {
		t.Errorf("dashboard ConfigMap labels %v, want grafana_dashboard=1", cm.GetLabels())
	}
}

// agentProbePort asks the real injector for a pod and returns the agent
// sidecar's container port serving /metrics.
func agentProbePort(t *testing.T) corev1.ContainerPort {
	t.Helper()
	w, err := webhook.New(webhook.Config{})
	if err != nil {
		t.Fatal(err)
	}
	pod := corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "demo"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	review, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID: "1", Namespace: "demo", Operation: admissionv1.Create,
			Kind:     metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
			Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
			Object:   runtime.RawExtension{Raw: raw},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/inject", bytes.NewReader(review))
	req.Header.Set("Content-Type", "application/json")
	w.ServeHTTP(rec, req)
	var resp admissionv1.AdmissionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil || resp.Response == nil || resp.Response.Patch == nil {
		t.Fatalf("review: %v %s", err, rec.Body.Bytes())
	}
	var patch []struct {
		Value json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal(resp.Response.Patch, &patch); err != nil {
		t.Fatal(err)
	}
	for _, op := range patch {
		var cs []corev1.Container
		var c corev1.Container
		if json.Unmarshal(op.Value, &cs) != nil {
			if json.Unmarshal(op.Value, &c) != nil {
				continue
			}
			cs = []corev1.Container{c}
		}
		for _, c := range cs {
			if c.Name != webhook.AgentContainerName {
				continue
			}
			for _, p := range c.Ports {
				if c.ReadinessProbe != nil && c.ReadinessProbe.HTTPGet != nil && c.ReadinessProbe.HTTPGet.Port.IntVal == p.ContainerPort {
					return p
				}
			}
		}
	}
	t.Fatalf("no agent container with its probe port in the patch %s", resp.Response.Patch)
	return corev1.ContainerPort{}
}
