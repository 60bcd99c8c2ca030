package webhook

import (
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/meshdns/meshdns/cni"
)

// annotations are what the webhook adds to an injected pod's metadata: the
// status mark and, in CNI mode, what the node's CNI plugin needs to program
// the redirect.
func (t *Template) annotations() map[string]string {
	a := map[string]string{AnnotationStatus: "injected"}
	if t.secure() {
		a[AnnotationCA] = string(t.caBundle)
	}
	if t.shifted != "" {
		a[AnnotationShiftedBy] = t.shifted
	}
	if t.CNI {
		a[cni.AnnotationRedirect] = cni.Redirect{ProxyUID: t.ProxyUID, ProxyGID: t.ProxyGID, DNSPort: t.DNSPort}.String()
	}
	return a
}

// firstContainers go first among the init containers, in order: the
// iptables init container (unless the CNI plugin programs the redirect),
// then the agent.
func (t *Template) firstContainers() []corev1.Container {
	if t.CNI {
		return []corev1.Container{t.agentContainer()}
	}
	return []corev1.Container{t.initContainer(), t.agentContainer()}
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
