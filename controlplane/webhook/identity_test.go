package webhook

import (
	"slices"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestServeHTTPControlPlaneCA: once the control plane has a CA, injected
// agents trust it and present their projected token; before (no CA yet),
// they dial as the template says, without a token.
func TestServeHTTPControlPlaneCA(t *testing.T) {
	var ca atomic.Pointer[[]byte]
	w, _ := newTestWebhook(t, Config{CABundle: func() []byte {
		if p := ca.Load(); p != nil {
			return *p
		}
		return nil
	}})
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}}
	inject := func() *corev1.Pod {
		t.Helper()
		return applyPatch(t, pod, decodeResponse(t, post(t, w, "/inject", reviewBody(t, pod))).Patch)
	}
	agentArgs := func(p *corev1.Pod) []string {
		for _, c := range p.Spec.InitContainers {
			if c.Name == AgentContainerName {
				return c.Args
			}
		}
		t.Fatal("no agent container")
		return nil
	}

	before := inject()
	if slices.Contains(agentArgs(before), "--token-file") || before.Annotations[AnnotationCA] != "" {
		t.Errorf("without a CA the agent got a token or a CA: %v %v", agentArgs(before), before.Annotations)
	}

	pem := []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
	ca.Store(&pem)
	after := inject()
	args := agentArgs(after)
	if !slices.Contains(args, "--token-file") || !slices.Contains(args, "--ca-cert") {
		t.Errorf("agent args %v lack --ca-cert and --token-file", args)
	}
	if after.Annotations[AnnotationCA] != string(pem) {
		t.Errorf("CA annotation = %q, want the control plane's CA", after.Annotations[AnnotationCA])
	}
	var vol *corev1.Volume
	for i := range after.Spec.Volumes {
		if after.Spec.Volumes[i].Name == IdentityVolumeName {
			vol = &after.Spec.Volumes[i]
		}
	}
	if vol == nil || vol.Projected == nil || len(vol.Projected.Sources) != 2 {
		t.Fatalf("identity volume = %+v", vol)
	}
	tok := vol.Projected.Sources[0].ServiceAccountToken
	if tok == nil || tok.Audience != "meshdns" || tok.ExpirationSeconds == nil || *tok.ExpirationSeconds != 600 {
		t.Errorf("token projection = %+v, want audience meshdns for 600s", tok)
	}
}
