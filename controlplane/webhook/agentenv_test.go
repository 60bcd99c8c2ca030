package webhook

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
)

// TestTemplateAgentEnv: the template file's agentEnv reaches the injected
// agent container after the webhook's own variables, value and valueFrom
// alike.
func TestTemplateAgentEnv(t *testing.T) {
	tmpl, err := ParseTemplate([]byte(`
agentEnv:
- name: GODEBUG
  value: madvdontneed=1
- name: NODE_NAME
  valueFrom: {fieldRef: {fieldPath: spec.nodeName}}
`))
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}}
	patch, err := tmpl.patch(pod)
	if err != nil {
		t.Fatal(err)
	}
	var env []corev1.EnvVar
	for _, c := range applyPatch(t, pod, patch).Spec.InitContainers {
		if c.Name == AgentContainerName {
			env = c.Env
		}
	}
	var names []string
	for _, e := range env {
		names = append(names, e.Name)
	}
	if diff := cmp.Diff([]string{"POD_NAME", "POD_NAMESPACE", "GOMEMLIMIT", "GODEBUG", "NODE_NAME"}, names); diff != "" {
		t.Fatalf("agent env names (-want +got):\n%s", diff)
	}
	if env[3].Value != "madvdontneed=1" || env[4].ValueFrom == nil || env[4].ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
		t.Errorf("agent env %+v lost a value or valueFrom", env[3:])
	}
	if def := DefaultTemplate(); len(def.agentContainer().Env) != 3 {
		t.Errorf("the default template adds env %+v", def.agentContainer().Env)
	}
}

// TestTemplateAgentEnvRefused: a name meshdns sets itself (or whose flag
// the webhook generates, which would silently win) and entries the API
// server would refuse in the patch fail template validation, naming the
// variable.
func TestTemplateAgentEnvRefused(t *testing.T) {
	for _, tc := range []struct{ name, file, want string }{
		{"memory limit", "agentEnv: [{name: GOMEMLIMIT, value: 1GiB}]", "GOMEMLIMIT is set by the webhook"},
		{"downward API", "agentEnv: [{name: POD_NAMESPACE, value: x}]", "POD_NAMESPACE is set by the webhook"},
		{"generated flag", "agentEnv: [{name: MESHDNS_DNS_ADDR, value: '127.0.0.1:53'}]", "MESHDNS_DNS_ADDR is set by the webhook's --dns-addr"},
		{"flag of a plaintext template", "plaintext: true\nagentEnv: [{name: MESHDNS_TOKEN_FILE, value: /t}]", "MESHDNS_TOKEN_FILE is set by the webhook's --token-file"},
		{"supervisor", "agentEnv: [{name: MESHDNS_INHERITED_FDS, value: '2'}]", "MESHDNS_INHERITED_FDS is set by the agent's supervisor"},
		{"no name", "agentEnv: [{value: x}]", "entry 0 has no name"},
		{"twice", "agentEnv: [{name: A, value: x}, {name: A, value: y}]", "A is set twice"},
		{"value and valueFrom", "agentEnv: [{name: A, value: x, valueFrom: {fieldRef: {fieldPath: spec.nodeName}}}]", "A has both value and valueFrom"},
		{"unknown field", "agentEnv: [{name: A, vaule: x}]", "unknown field"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseTemplate([]byte(tc.file))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ParseTemplate(%q) = %v, want an error with %q", tc.file, err, tc.want)
			}
		})
	}
	// A MESHDNS_ variable of a flag the webhook does not generate is the
	// user's to set.
	if _, err := ParseTemplate([]byte("agentEnv: [{name: MESHDNS_LOG_LEVEL, value: debug}]")); err != nil {
		t.Errorf("MESHDNS_LOG_LEVEL refused: %v", err)
	}
}
