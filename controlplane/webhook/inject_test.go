package webhook

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshdns/meshdns/cni"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

func TestDecide(t *testing.T) {
	tests := []struct {
		name string
		pod  corev1.Pod
		pol  policy
		want skipReason
	}{
		{name: "namespace enabled, no annotation", pol: namespaceEnabled, want: inject},
		{name: "namespace enabled, opt out", pod: annotated("false"), pol: namespaceEnabled, want: skipOptOut},
		{name: "namespace enabled, opt in", pod: annotated("true"), pol: namespaceEnabled, want: inject},
		{name: "namespace enabled, unparsable annotation means no opinion", pod: annotated("maybe"), pol: namespaceEnabled, want: inject},
		{name: "annotation only, no annotation", pol: annotationOnly, want: skipNotOptedIn},
		{name: "annotation only, opt in", pod: annotated("true"), pol: annotationOnly, want: inject},
		{name: "annotation only, opt in with spaces", pod: annotated(" True "), pol: annotationOnly, want: inject},
		{name: "annotation only, opt out", pod: annotated("false"), pol: annotationOnly, want: skipOptOut},
		{name: "annotation only, unparsable", pod: annotated("yes please"), pol: annotationOnly, want: skipNotOptedIn},
		{name: "annotation only, pod label opt in", pod: labelled("true"), pol: annotationOnly, want: inject},
		{name: "namespace enabled, pod label opt out", pod: labelled("false"), pol: namespaceEnabled, want: skipOptOut},
		{
			name: "annotation wins over the label",
			pod: func() corev1.Pod {
				p := annotated("false")
				p.Labels = map[string]string{LabelInject: "true"}
				return p
			}(),
			pol: annotationOnly, want: skipOptOut,
		},
		{name: "unparsable annotation leaves it to the label", pod: func() corev1.Pod {
			p := annotated("maybe")
			p.Labels = map[string]string{LabelInject: "true"}
			return p
		}(), pol: annotationOnly, want: inject},
		{
			name: "host network even when opted in",
			pod: func() corev1.Pod {
				p := annotated("true")
				p.Spec.HostNetwork = true
				return p
			}(),
			pol: namespaceEnabled, want: skipHostNetwork,
		},
		{
			name: "status annotation",
			pod:  corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{AnnotationStatus: "injected"}}},
			pol:  namespaceEnabled, want: skipInjected,
		},
		{
			name: "agent container without annotation",
			pod:  corev1.Pod{Spec: corev1.PodSpec{InitContainers: []corev1.Container{{Name: AgentContainerName}}}},
			pol:  namespaceEnabled, want: skipInjected,
		},
		{
			name: "init container in containers",
			pod:  corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: InitContainerName}}}},
			pol:  namespaceEnabled, want: skipInjected,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, decide(&tt.pod, tt.pol, false)); diff != "" {
				t.Errorf("decide (-want +got):\n%s", diff)
			}
		})
	}
}

func labelled(v string) corev1.Pod {
	return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{LabelInject: v}}}
}

func annotated(v string) corev1.Pod {
	return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{AnnotationInject: v}}}
}

// TestPatchGolden checks the exact patch against testdata/<name>.json and
// that applying it gives a pod with the containers in the right places.
func withCA(t Template, ca string) Template {
	t.caBundle = []byte(ca)
	return t
}

// TestSuperviseSwitch: the sidecar runs under its supervisor unless the
// template file turns it off, and a template layered on one that turned it
// off keeps it off.
func TestSuperviseSwitch(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		want       bool
	}{
		{name: "absent", file: "{}", want: true},
		{name: "on", file: "supervise: true", want: true},
		{name: "off", file: "supervise: false", want: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tmpl, err := ParseTemplate([]byte(tc.file))
			if err != nil {
				t.Fatal(err)
			}
			args := tmpl.agentContainer().Args
			if got := slices.Contains(args, "--supervise"); got != tc.want {
				t.Errorf("agent args %q: --supervise present = %v, want %v", args, got, tc.want)
			}
			layered := Template{}.over(tmpl)
			if got := layered.supervised(); got != tc.want {
				t.Errorf("layered on it: supervised = %v, want %v", got, tc.want)
			}
		})
	}
	if _, err := ParseTemplate([]byte("supervise: sometimes")); err == nil {
		t.Error("supervise: sometimes was accepted")
	}
}

func TestPatchGolden(t *testing.T) {
	custom := Template{
		Image:                     "registry.example/meshdns:v1.2.3",
		ControlPlane:              "cp.example:15012",
		ProxyUID:                  2000,
		ProxyGID:                  3000,
		DNSPort:                   5353,
		AdminPort:                 9901,
		AgentArgs:                 []string{"--log-level", "debug"},
		IPv6:                      true,
		HoldApplicationUntilReady: true,
		Supervise:                 ptr(false),
		// An image without the agent's own build runs the full binary.
		AgentCommand: []string{"meshdns"},
	}.over(DefaultTemplate())
	app := corev1.Container{Name: "app", Image: "app:1"}
	tests := []struct {
		name     string
		template Template
		pod      corev1.Pod
	}{
		{
			name:     "bare_pod",
			template: DefaultTemplate(),
			pod:      corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{app}}},
		},
		{
			name:     "pod_with_annotations_init_containers_and_volumes",
			template: DefaultTemplate(),
			pod: corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"a": "b"}},
				Spec: corev1.PodSpec{
					InitContainers: []corev1.Container{{Name: "migrate", Image: "migrate:1"}},
					Containers:     []corev1.Container{app},
					Volumes:        []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
				},
			},
		},
		{
			name:     "custom_template",
			template: custom,
			pod:      corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{app}}},
		},
		{
			// The webhook knows the control plane's CA: TLS, the CA from
			// the pod's annotation, the projected token.
			name:     "secure",
			template: withCA(DefaultTemplate(), "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"),
			pod:      corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{app}}},
		},
		{
			name:     "secure_but_plaintext_asked",
			template: withCA(Template{Plaintext: true}.over(DefaultTemplate()), "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"),
			pod:      corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{app}}},
		},
		{
			name:     "cni_mode",
			template: Template{CNI: true}.over(DefaultTemplate()),
			pod:      corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{app}}},
		},
		{
			name:     "cni_mode_with_annotations_and_init_containers",
			template: Template{CNI: true, ProxyUID: 2000, DNSPort: 5353}.over(DefaultTemplate()),
			pod: corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"a": "b"}},
				Spec: corev1.PodSpec{
					InitContainers: []corev1.Container{{Name: "migrate", Image: "migrate:1"}},
					Containers:     []corev1.Container{app},
				},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			patch, err := tt.template.patch(&tt.pod)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, filepath.Join("testdata", tt.name+".json"), patch)

			got := applyPatch(t, &tt.pod, patch)
			var names []string
			for _, c := range got.Spec.InitContainers {
				names = append(names, c.Name)
			}
			want := []string{InitContainerName, AgentContainerName}
			if tt.template.CNI {
				// The node's CNI plugin programs the redirect, from the
				// annotation: nothing in the pod needs NET_ADMIN.
				want = []string{AgentContainerName}
				r, err := cni.ParseRedirect(got.Annotations[cni.AnnotationRedirect])
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(cni.Redirect{ProxyUID: tt.template.ProxyUID, ProxyGID: tt.template.ProxyGID, DNSPort: tt.template.DNSPort}, r); diff != "" {
					t.Errorf("redirect annotation (-want +got):\n%s", diff)
				}
			} else if _, ok := got.Annotations[cni.AnnotationRedirect]; ok {
				t.Errorf("init container mode set the CNI annotation")
			}
			if got.Annotations[AnnotationStatus] != "injected" {
				t.Errorf("status annotation %q", got.Annotations[AnnotationStatus])
			}
			for _, c := range tt.pod.Spec.InitContainers {
				want = append(want, c.Name)
			}
			if diff := cmp.Diff(want, names); diff != "" {
				t.Errorf("init container order (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.pod.Spec.Containers, got.Spec.Containers); diff != "" {
				t.Errorf("application containers changed (-want +got):\n%s", diff)
			}
			if got.Annotations[AnnotationStatus] != "injected" {
				t.Errorf("status annotation = %q", got.Annotations[AnnotationStatus])
			}
			for k, v := range tt.pod.Annotations {
				if got.Annotations[k] != v {
					t.Errorf("annotation %s = %q, want %q kept", k, got.Annotations[k], v)
				}
			}
			var state corev1.Volume
			for _, v := range got.Spec.Volumes {
				if v.Name == StateVolumeName {
					state = v
				}
			}
			if state.EmptyDir == nil || state.EmptyDir.Medium != corev1.StorageMediumMemory {
				t.Errorf("state volume = %+v, want in-memory %s", state, StateVolumeName)
			}
			if _, ok := got.Annotations[AnnotationCA]; ok != tt.template.secure() {
				t.Errorf("CA annotation present %v, want %v", ok, tt.template.secure())
			}
			if decide(got, namespaceEnabled, false) != skipInjected {
				t.Errorf("patched pod is not recognised as injected")
			}
		})
	}
}

// TestInitBinaryBackend checks that only the iptables binaries' backends
// get NET_RAW and a writable root (for /run/xtables.lock).
func TestInitBinaryBackend(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want bool
	}{
		{name: "default", want: false},
		{name: "native", args: []string{"--backend", "native"}, want: false},
		{name: "auto", args: []string{"--backend=auto"}, want: false},
		{name: "legacy", args: []string{"--backend", "legacy"}, want: true},
		{name: "nft", args: []string{"-backend=nft"}, want: true},
		{name: "last wins", args: []string{"--backend", "legacy", "--backend", "native"}, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tmpl := DefaultTemplate()
			tmpl.IptablesArgs = tt.args
			sc := tmpl.initContainer().SecurityContext
			if got := slices.Contains(sc.Capabilities.Add, "NET_RAW"); got != tt.want {
				t.Errorf("NET_RAW = %v, want %v (%v)", got, tt.want, sc.Capabilities.Add)
			}
			if got := !*sc.ReadOnlyRootFilesystem; got != tt.want {
				t.Errorf("writable root = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestPatchRefusesVolumeClash(t *testing.T) {
	pod := corev1.Pod{Spec: corev1.PodSpec{Volumes: []corev1.Volume{{Name: StateVolumeName}}}}
	tmpl := DefaultTemplate()
	if _, err := tmpl.patch(&pod); err == nil {
		t.Fatal("patch of a pod with a clashing volume succeeded")
	}
}

// TestAgentContainerContract pins the properties the deployment relies on, so a
// golden-file update cannot drop one unnoticed.
func TestAgentContainerContract(t *testing.T) {
	tmpl := DefaultTemplate()
	agent, init := tmpl.agentContainer(), tmpl.initContainer()
	checks := []struct {
		name string
		ok   bool
	}{
		{"agent is a native sidecar", agent.RestartPolicy != nil && *agent.RestartPolicy == corev1.ContainerRestartPolicyAlways},
		{"agent runs as proxy uid", *agent.SecurityContext.RunAsUser == 1337 && *agent.SecurityContext.RunAsGroup == 1337},
		{"agent has no capabilities", len(agent.SecurityContext.Capabilities.Add) == 0 && cmp.Equal(agent.SecurityContext.Capabilities.Drop, []corev1.Capability{"ALL"})},
		{"agent readiness on the probe port", agent.ReadinessProbe.HTTPGet.Path == "/healthz/ready" && agent.ReadinessProbe.HTTPGet.Port.IntVal == 15121},
		{"agent admin on loopback, probes on the pod IP", cmp.Equal(agent.Args[len(agent.Args)-4:], []string{"--admin-addr", "127.0.0.1:15020", "--probe-addr", "0.0.0.0:15121"})},
		{"only the probe port is declared", len(agent.Ports) == 1 && agent.Ports[0].ContainerPort == 15121},
		{"agent has requests", !agent.Resources.Requests.Cpu().IsZero() && !agent.Resources.Requests.Memory().IsZero()},
		{"agent downward API", agent.Env[0].ValueFrom.FieldRef.FieldPath == "metadata.name" && agent.Env[1].ValueFrom.FieldRef.FieldPath == "metadata.namespace"},
		{"init runs as root", *init.SecurityContext.RunAsUser == 0 && !*init.SecurityContext.RunAsNonRoot},
		{"init has only NET_ADMIN", cmp.Equal(init.SecurityContext.Capabilities.Add, []corev1.Capability{"NET_ADMIN"}) && cmp.Equal(init.SecurityContext.Capabilities.Drop, []corev1.Capability{"ALL"})},
		{"init has a read-only root", *init.SecurityContext.ReadOnlyRootFilesystem},
		{"init has the runtime's seccomp profile", init.SecurityContext.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault},
		{"init is not a sidecar", init.RestartPolicy == nil},
		{"init excludes the proxy uid", cmp.Equal(init.Args[:6], []string{"iptables", "apply", "--proxy-uid", "1337", "--proxy-gid", "1337"})},
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			if !c.ok {
				t.Errorf("violated; agent=%+v init=%+v", agent, init)
			}
		})
	}
}

func golden(t *testing.T, path string, got []byte) {
	t.Helper()
	var pretty []byte
	var v any
	if err := json.Unmarshal(got, &v); err != nil {
		t.Fatal(err)
	}
	pretty, _ = json.MarshalIndent(v, "", "  ")
	pretty = append(pretty, '\n')
	if *update {
		if err := os.WriteFile(path, pretty, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create)", err)
	}
	if diff := cmp.Diff(string(want), string(pretty)); diff != "" {
		t.Errorf("%s (-want +got):\n%s", path, diff)
	}
}

func applyPatch(t testing.TB, pod *corev1.Pod, patch []byte) *corev1.Pod {
	t.Helper()
	p, err := jsonpatch.DecodePatch(patch)
	if err != nil {
		t.Fatalf("decode patch: %v", err)
	}
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	out, err := p.Apply(raw)
	if err != nil {
		t.Fatalf("apply patch: %v", err)
	}
	var got corev1.Pod
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	return &got
}

// BenchmarkPatch is the injection itself, without HTTP and JSON decoding
// of the review.
func BenchmarkPatch(b *testing.B) {
	tmpl := DefaultTemplate()
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tmpl.patch(pod); err != nil {
			b.Fatal(err)
		}
	}
}
