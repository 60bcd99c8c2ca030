package webhook

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
)

// enforcing is a Policies whose namespace "locked" has an enforcing
// policy selecting pods labelled tier=secure, and whose namespace "whole"
// has one selecting every pod.
type enforcing struct{}

func (enforcing) Enforced(ns string, l map[string]string) bool {
	return ns == "whole" || ns == "locked" && l["tier"] == "secure"
}

func (enforcing) EnforcedIn(ns string) bool { return ns == "whole" || ns == "locked" }

// restrictedPod is what a pod's author sets for a pod an enforcing policy
// selects: explicit ids that are not the proxy's, no privilege escalation.
func restrictedPod() *corev1.Pod {
	return &corev1.Pod{
		Spec: corev1.PodSpec{
			SecurityContext: &corev1.PodSecurityContext{RunAsUser: ptr(int64(1000)), RunAsGroup: ptr(int64(1000))},
			Containers: []corev1.Container{{Name: "app", Image: "app", SecurityContext: &corev1.SecurityContext{
				AllowPrivilegeEscalation: ptr(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			}}},
		},
	}
}

func TestEnforcedPods(t *testing.T) {
	w, _ := newTestWebhook(t, Config{Policies: enforcing{}})
	edit := func(f func(p *corev1.Pod)) *corev1.Pod {
		p := restrictedPod()
		f(p)
		return p
	}
	app := func(p *corev1.Pod) *corev1.SecurityContext { return p.Spec.Containers[0].SecurityContext }
	reinvoked := applyPatch(t, restrictedPod(), decodeResponse(t, post(t, w, "/inject", reviewIn(t, "whole", restrictedPod()))).Patch)
	tests := []struct {
		name      string
		namespace string
		path      string
		pod       *corev1.Pod
		wantDeny  string // part of the message; "" admits
		wantPatch bool
	}{
		{name: "restricted pod is injected", namespace: "whole", pod: restrictedPod(), wantPatch: true},
		{name: "annotated path injects without opt-in", namespace: "whole", path: "/inject/annotated", pod: restrictedPod(), wantPatch: true},
		{name: "reinvocation of the injected pod", namespace: "whole", pod: reinvoked},
		{name: "opt-out annotation", namespace: "whole", pod: edit(func(p *corev1.Pod) { p.Annotations = map[string]string{AnnotationInject: "false"} }), wantDeny: "opts out"},
		{name: "opt-out label", namespace: "whole", pod: edit(func(p *corev1.Pod) { p.Labels = map[string]string{LabelInject: "false"} }), wantDeny: "opts out"},
		{name: "container runs as the proxy uid", namespace: "whole", pod: edit(func(p *corev1.Pod) { app(p).RunAsUser = ptr(int64(1337)) }), wantDeny: "the meshdns proxy's uid or gid"},
		{name: "pod runs as the proxy gid", namespace: "whole", pod: edit(func(p *corev1.Pod) { p.Spec.SecurityContext.RunAsGroup = ptr(int64(1337)) }), wantDeny: "the meshdns proxy's uid or gid"},
		{name: "supplemental group", namespace: "whole", pod: edit(func(p *corev1.Pod) { p.Spec.SecurityContext.SupplementalGroups = []int64{5, 1337} }), wantDeny: "supplementalGroups or fsGroup"},
		{name: "fsGroup", namespace: "whole", pod: edit(func(p *corev1.Pod) { p.Spec.SecurityContext.FSGroup = ptr(int64(1337)) }), wantDeny: "supplementalGroups or fsGroup"},
		{name: "image's user", namespace: "whole", pod: edit(func(p *corev1.Pod) { p.Spec.SecurityContext.RunAsUser = nil }), wantDeny: "set runAsUser and runAsGroup"},
		{name: "init container as the proxy", namespace: "whole", pod: edit(func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{Name: "setup", Image: "x", SecurityContext: &corev1.SecurityContext{
				RunAsUser: ptr(int64(1337)), AllowPrivilegeEscalation: ptr(false)}}}
		}), wantDeny: `container "setup"`},
		{name: "privileged", namespace: "whole", pod: edit(func(p *corev1.Pod) { app(p).Privileged = ptr(true) }), wantDeny: "privileged"},
		{name: "privilege escalation", namespace: "whole", pod: edit(func(p *corev1.Pod) { app(p).AllowPrivilegeEscalation = nil }), wantDeny: "allowPrivilegeEscalation: false"},
		{name: "NET_ADMIN", namespace: "whole", pod: edit(func(p *corev1.Pod) { app(p).Capabilities.Add = []corev1.Capability{"cap_net_admin"} }), wantDeny: "adds capability"},
		{name: "root keeping SETUID", namespace: "whole", pod: edit(func(p *corev1.Pod) {
			app(p).RunAsUser, app(p).Capabilities.Drop = ptr(int64(0)), []corev1.Capability{"SETGID"}
		}), wantDeny: "runs as root"},
		{name: "root dropping SETUID and SETGID", namespace: "whole", pod: edit(func(p *corev1.Pod) {
			app(p).RunAsUser, app(p).Capabilities.Drop = ptr(int64(0)), []corev1.Capability{"SETUID", "CAP_SETGID"}
		}), wantPatch: true},
		{name: "forged injected annotation", namespace: "whole", pod: edit(func(p *corev1.Pod) { p.Annotations = map[string]string{AnnotationStatus: "injected"} }), wantDeny: "marked as injected"},
		{name: "forged agent container", namespace: "whole", pod: edit(func(p *corev1.Pod) {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: AgentContainerName, Image: "evil", SecurityContext: &corev1.SecurityContext{
				RunAsUser: ptr(int64(1337)), RunAsGroup: ptr(int64(1337)), AllowPrivilegeEscalation: ptr(false)}})
		}), wantDeny: `container "meshdns-agent"`},
		{name: "label selects the pod", namespace: "locked", pod: edit(func(p *corev1.Pod) {
			p.Labels = map[string]string{"tier": "secure"}
			app(p).RunAsUser = ptr(int64(1337))
		}), wantDeny: "the meshdns proxy's uid or gid"},
		{name: "label does not select the pod", namespace: "locked", pod: edit(func(p *corev1.Pod) { app(p).RunAsUser = ptr(int64(1337)) }), wantPatch: true},
		{name: "no policy: opt out as before", namespace: "free", pod: edit(func(p *corev1.Pod) { p.Annotations = map[string]string{AnnotationInject: "false"} })},
		{name: "no policy: proxy uid as before", namespace: "free", pod: edit(func(p *corev1.Pod) { app(p).RunAsUser = ptr(int64(1337)) }), wantPatch: true},
		{name: "host network stays alone", namespace: "whole", pod: edit(func(p *corev1.Pod) { p.Spec.HostNetwork = true })},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := tt.path
			if path == "" {
				path = "/inject"
			}
			resp := decodeResponse(t, post(t, w, path, reviewIn(t, tt.namespace, tt.pod)))
			if tt.wantDeny != "" {
				if resp.Allowed || resp.Result == nil || !strings.Contains(resp.Result.Message, tt.wantDeny) || resp.Result.Code != 403 {
					t.Fatalf("want denied with %q, got allowed=%v result=%+v", tt.wantDeny, resp.Allowed, resp.Result)
				}
				return
			}
			if !resp.Allowed {
				t.Fatalf("denied: %+v", resp.Result)
			}
			if got := len(resp.Patch) > 0; got != tt.wantPatch {
				t.Errorf("patched = %v, want %v (warnings %q)", got, tt.wantPatch, resp.Warnings)
			}
		})
	}
	if got := testutil.ToFloat64(w.metrics.requests.WithLabelValues("denied")); got == 0 {
		t.Error("no denied reviews counted")
	}
}

// TestEnforcedTooLarge: a pod too large to inspect is refused where an
// enforcing policy could select it, and admitted (uninjected, with a
// warning) elsewhere, as before.
func TestEnforcedTooLarge(t *testing.T) {
	w, _ := newTestWebhook(t, Config{Policies: enforcing{}})
	bigSpec := []byte(`{"spec":{"containers":[` + strings.Repeat(`{},`, maxPodObjects) + `{}]}}`)
	var meta strings.Builder
	meta.WriteString(`{"metadata":{"annotations":{`)
	for i := range maxPodMembers + 2 { // one more member than the limit
		fmt.Fprintf(&meta, `"k%d":"",`, i)
	}
	bigMeta := []byte(strings.TrimSuffix(meta.String(), ",") + `}},"spec":{}}`)
	tests := []struct {
		name        string
		namespace   string
		raw         []byte
		wantAllowed bool
	}{
		{name: "spec, namespace-wide policy", namespace: "whole", raw: bigSpec},
		// Its labels (none) are read: the policy does not select it.
		{name: "spec, policy selecting other pods", namespace: "locked", raw: bigSpec, wantAllowed: true},
		{name: "spec, no policy", namespace: "free", raw: bigSpec, wantAllowed: true},
		// Its labels cannot be read: any enforcing policy refuses it.
		{name: "metadata, policy selecting by label", namespace: "locked", raw: bigMeta},
		{name: "metadata, no policy", namespace: "free", raw: bigMeta, wantAllowed: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := decodeResponse(t, post(t, w, "/inject", reviewWith(t, func(r *admissionv1.AdmissionRequest) {
				r.Namespace, r.Object.Raw = tt.namespace, tt.raw
			})))
			if resp.Allowed != tt.wantAllowed || len(resp.Patch) > 0 {
				t.Errorf("allowed=%v patch=%d bytes, want allowed=%v and no patch", resp.Allowed, len(resp.Patch), tt.wantAllowed)
			}
			if tt.wantAllowed && !strings.Contains(strings.Join(resp.Warnings, ""), "too large") {
				t.Errorf("warnings %q, want one saying the pod is too large", resp.Warnings)
			}
		})
	}
}

func reviewIn(t testing.TB, ns string, pod *corev1.Pod) []byte {
	t.Helper()
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	return reviewWith(t, func(r *admissionv1.AdmissionRequest) { r.Namespace, r.Object.Raw = ns, raw })
}
