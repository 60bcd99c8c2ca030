package webhook

import (
	"reflect"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// twoTemplates returns two templates that set every exported field, to
// different values where the type allows (a bool can only be true).
func twoTemplates() (a, b Template) {
	res := func(cpu string) corev1.ResourceRequirements {
		return corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}}
	}
	qa, qb := resource.MustParse("8Mi"), resource.MustParse("9Mi")
	a = Template{Image: "a", ImagePullPolicy: corev1.PullAlways, Command: []string{"a"}, AgentCommand: []string{"a"},
		ControlPlane: "a:1", ClusterDomain: "a.local", ProxyUID: 1, ProxyGID: 2, DNSPort: 3, IPv6: true, AdminPort: 4,
		ProbePort: 5, TokenAudience: "a", TokenExpirationSeconds: 601, Plaintext: true, StateDir: "/a",
		StateSizeLimit: &qa, AgentResources: res("1m"), InitResources: res("2m"), Supervise: ptr(true),
		AgentArgs: []string{"-a"}, IptablesArgs: []string{"-a"}, HoldApplicationUntilReady: true, CNI: true,
		AgentEnv:    []corev1.EnvVar{{Name: "A", Value: "a"}},
		BesideIstio: IstioNumbers{DNSPort: 6, AdminPort: 7, ProxyUID: 8, ProxyGID: 9},
		shifted:     "a"}
	b = Template{Image: "b", ImagePullPolicy: corev1.PullNever, Command: []string{"b"}, AgentCommand: []string{"b"},
		ControlPlane: "b:1", ClusterDomain: "b.local", ProxyUID: 11, ProxyGID: 12, DNSPort: 13, IPv6: true, AdminPort: 14,
		ProbePort: 15, TokenAudience: "b", TokenExpirationSeconds: 602, Plaintext: true, StateDir: "/b",
		StateSizeLimit: &qb, AgentResources: res("3m"), InitResources: res("4m"), Supervise: ptr(false),
		AgentArgs: []string{"-b"}, IptablesArgs: []string{"-b"}, HoldApplicationUntilReady: true, CNI: true,
		AgentEnv:    []corev1.EnvVar{{Name: "B", Value: "b"}},
		BesideIstio: IstioNumbers{DNSPort: 16, AdminPort: 17, ProxyUID: 18, ProxyGID: 19},
		shifted:     "b"}
	return a, b
}

var cmpTemplate = cmp.AllowUnexported(Template{})

// TestTemplateOverEveryField: a field a layer sets wins over the layer
// below, and a field it leaves zero takes the one below's, for every
// exported field (a field added later is covered once twoTemplates sets
// it, and this test fails until it does).
func TestTemplateOverEveryField(t *testing.T) {
	a, b := twoTemplates()
	ta := reflect.TypeFor[Template]()
	for i := range ta.NumField() {
		f := ta.Field(i)
		if !f.IsExported() {
			continue
		}
		va, vb := reflect.ValueOf(a).Field(i), reflect.ValueOf(b).Field(i)
		if isEmpty(va) || isEmpty(vb) {
			t.Fatalf("twoTemplates leaves %s empty", f.Name)
		}
		if f.Type.Kind() != reflect.Bool && reflect.DeepEqual(va.Interface(), vb.Interface()) {
			t.Fatalf("twoTemplates sets %s alike in both", f.Name)
		}
		t.Run(f.Name, func(t *testing.T) {
			layered := a
			reflect.ValueOf(&layered).Elem().Field(i).SetZero()
			want := a
			reflect.ValueOf(&want).Elem().Field(i).Set(vb)
			if diff := cmp.Diff(want, layered.over(b), cmpTemplate); diff != "" {
				t.Errorf("%s zero, over another template (-want +got):\n%s", f.Name, diff)
			}
		})
	}
	if diff := cmp.Diff(a, a.over(b), cmpTemplate); diff != "" {
		t.Errorf("a full template over another (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(a, a.over(Template{}), cmpTemplate); diff != "" {
		t.Errorf("a full template over an empty one (-want +got):\n%s", diff)
	}
}

// TestTemplateOverZeroValues: what counts as unset in a layer, field by
// field for the Istio numbers, as a whole for resources, and the
// per-request fields never taken from below.
func TestTemplateOverZeroValues(t *testing.T) {
	a, _ := twoTemplates()
	for _, tc := range []struct {
		name  string
		layer Template
		want  func(*Template)
	}{
		{name: "empty lists fall back", layer: Template{Command: []string{}, AgentArgs: []string{}, AgentEnv: []corev1.EnvVar{}},
			want: func(w *Template) {}},
		{name: "istio numbers layer field by field", layer: Template{BesideIstio: IstioNumbers{AdminPort: 25020, ProxyGID: 4000}},
			want: func(w *Template) { w.BesideIstio.AdminPort, w.BesideIstio.ProxyGID = 25020, 4000 }},
		{name: "resources replace as a whole", layer: Template{AgentResources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}}},
			want: func(w *Template) {
				w.AgentResources = corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}}
			}},
		{name: "supervise false is set", layer: Template{Supervise: ptr(false)},
			want: func(w *Template) { w.Supervise = ptr(false) }},
		{name: "per-request fields keep the layer's", layer: Template{shifted: "mine"},
			want: func(w *Template) { w.shifted = "mine" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := a
			want.shifted = ""
			tc.want(&want)
			if diff := cmp.Diff(want, tc.layer.over(a), cmpTemplate); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
