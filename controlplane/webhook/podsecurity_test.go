package webhook

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/pod-security-admission/api"
	psa "k8s.io/pod-security-admission/policy"
)

// TestPodSecurityLevels evaluates injected pods with the Pod Security
// admission's own checks: in init container mode the pod needs the
// privileged level (NET_ADMIN, root), in CNI mode it stays restricted when
// the application is. The real API server enforces the same checks in
// e2e/node; this runs without one.
func TestPodSecurityLevels(t *testing.T) {
	eval, err := psa.NewEvaluator(psa.DefaultChecks())
	if err != nil {
		t.Fatal(err)
	}
	no, yes, uid := false, true, int64(1000)
	app := corev1.Pod{Spec: corev1.PodSpec{
		SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: &yes, RunAsUser: &uid,
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
		Containers: []corev1.Container{{Name: "app", Image: "app:1", SecurityContext: &corev1.SecurityContext{
			AllowPrivilegeEscalation: &no, Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}}},
	}}
	// A bare application pod (no pod-level seccomp or non-root) shows the
	// sidecar's own settings: it must not be the one that fails.
	bare := corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app:1"}}}}
	check := func(pod *corev1.Pod, level api.Level) psa.AggregateCheckResult {
		return psa.AggregateCheckResults(eval.EvaluatePod(api.LevelVersion{Level: level, Version: api.LatestVersion()}, &pod.ObjectMeta, &pod.Spec))
	}
	if r := check(&app, api.LevelRestricted); !r.Allowed {
		t.Fatalf("the application pod itself fails restricted: %v", r.ForbiddenReasons)
	}
	tests := []struct {
		name          string
		template      Template
		pod           corev1.Pod
		allowed       map[api.Level]bool
		forbiddenHint string // in the reasons when not allowed
	}{
		{name: "init container mode", template: DefaultTemplate(), pod: app,
			allowed: map[api.Level]bool{api.LevelBaseline: false, api.LevelRestricted: false}, forbiddenHint: "NET_ADMIN"},
		{name: "CNI mode", template: Template{CNI: true}.over(DefaultTemplate()), pod: app,
			allowed: map[api.Level]bool{api.LevelBaseline: true, api.LevelRestricted: true}},
		{name: "CNI mode with a bare application", template: Template{CNI: true}.over(DefaultTemplate()), pod: bare,
			allowed: map[api.Level]bool{api.LevelBaseline: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			patch, err := tt.template.patch(&tt.pod)
			if err != nil {
				t.Fatal(err)
			}
			got := *applyPatch(t, &tt.pod, patch)
			for level, want := range tt.allowed {
				r := check(&got, level)
				if r.Allowed != want {
					t.Errorf("%s: allowed %v, want %v (%v: %v)", level, r.Allowed, want, r.ForbiddenReasons, r.ForbiddenDetails)
				}
				if !r.Allowed && !strings.Contains(strings.Join(r.ForbiddenDetails, " "), tt.forbiddenHint) {
					t.Errorf("%s forbids for %v, want %s among them", level, r.ForbiddenDetails, tt.forbiddenHint)
				}
			}
			if tt.template.CNI {
				// With a bare application only the application's own
				// containers may fail restricted, never the agent.
				r := check(&got, api.LevelRestricted)
				if strings.Contains(strings.Join(r.ForbiddenDetails, " "), AgentContainerName) {
					t.Errorf("the agent fails restricted: %v", r.ForbiddenDetails)
				}
			}
		})
	}
}
