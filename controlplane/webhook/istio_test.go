package webhook

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// istioShapedPod is a pod as Istio's injector leaves it: istio-init, the
// istio-proxy native sidecar, and its status annotation.
func istioShapedPod(name string) *corev1.Pod {
	p := testPod(name, map[string]string{istioStatus: `{"initContainers":["istio-init"],"containers":["istio-proxy"]}`}, false)
	p.Spec.InitContainers = []corev1.Container{
		{Name: "istio-init", Image: "docker.io/istio/proxyv2:1.24.0", Args: []string{"istio-iptables", "-p", "15001", "-z", "15006", "-u", "1337"}},
		{Name: istioProxyName, Image: "docker.io/istio/proxyv2:1.24.0", RestartPolicy: ptr(corev1.ContainerRestartPolicyAlways),
			Ports: []corev1.ContainerPort{{Name: "http-envoy-prom", ContainerPort: 15090}}},
	}
	return p
}

func TestWithIstio(t *testing.T) {
	tests := []struct {
		name string
		pod  *corev1.Pod
		want bool
	}{
		{name: "plain pod", pod: testPod("p", nil, false)},
		{name: "istio injected", pod: istioShapedPod("p"), want: true},
		{name: "istio-proxy as a plain container", pod: func() *corev1.Pod {
			p := testPod("p", nil, false)
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: istioProxyName})
			return p
		}(), want: true},
		{name: "istio label asks for the sidecar", pod: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{istioInject: "true"}}}, want: true},
		{name: "istio label declines it", pod: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{istioInject: "false"}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := withIstio(tt.pod); got != tt.want {
				t.Errorf("withIstio = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestBesideIstio(t *testing.T) {
	type numbers struct {
		DNS, Admin, Probe int32
		UID, GID          int64
	}
	of := func(t Template) numbers { return numbers{t.DNSPort, t.AdminPort, t.ProbePort, t.ProxyUID, t.ProxyGID} }
	tests := []struct {
		name        string
		template    Template
		want        numbers
		wantShifted string
	}{
		{
			name: "defaults move off Istio's numbers", template: DefaultTemplate(),
			want:        numbers{DNS: 15153, Admin: 15120, Probe: 15121, UID: 1553, GID: 1553},
			wantShifted: "dnsPort=15153,adminPort=15120,proxyUID=1553,proxyGID=1553",
		},
		{
			name:     "numbers chosen apart from Istio's stay",
			template: Template{DNSPort: 16053, AdminPort: 16020, ProxyUID: 2000, ProxyGID: 2000}.over(DefaultTemplate()),
			want:     numbers{DNS: 16053, Admin: 16020, Probe: 15121, UID: 2000, GID: 2000},
		},
		{
			name:        "own alternatives",
			template:    Template{BesideIstio: IstioNumbers{DNSPort: 25053, ProxyUID: 4000}}.over(DefaultTemplate()),
			want:        numbers{DNS: 25053, Admin: 15120, Probe: 15121, UID: 4000, GID: 1553},
			wantShifted: "dnsPort=25053,adminPort=15120,proxyUID=4000,proxyGID=1553",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, shifted := tt.template.besideIstio()
			if diff := cmp.Diff(tt.want, of(got)); diff != "" {
				t.Errorf("numbers (-want +got):\n%s", diff)
			}
			if shifted != tt.wantShifted {
				t.Errorf("shifted = %q, want %q", shifted, tt.wantShifted)
			}
			if err := got.validate(); err != nil {
				t.Errorf("shifted template invalid: %v", err)
			}
		})
	}
	for _, bad := range []string{"besideIstio: {dnsPort: 15053}", "besideIstio: {proxyUID: 1337}", "besideIstio: {adminPort: 15121}"} {
		if _, err := ParseTemplate([]byte(bad)); err == nil {
			t.Errorf("template %q accepted: an alternative must not clash", bad)
		}
	}
}
