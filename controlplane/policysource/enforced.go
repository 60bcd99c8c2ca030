package policysource

import (
	"k8s.io/apimachinery/pkg/labels"

	"github.com/meshdns/meshdns/internal/namewire"
)

// Enforced reports whether a policy in Enforce mode selects a pod of
// namespace with podLabels: the injection webhook's question about a pod
// at admission, where the labels are the pod's own (not the pod watch's).
// As in Merge, any mode but Audit enforces.
func (s *Store) Enforced(namespace string, podLabels map[string]string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.byNS[namespace] {
		if p.DNS.Mode != namewire.PolicyModeAudit && p.Selector.Matches(labels.Set(podLabels)) {
			return true
		}
	}
	return false
}

// EnforcedIn reports whether namespace has a policy in Enforce mode,
// whatever it selects.
func (s *Store) EnforcedIn(namespace string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.byNS[namespace] {
		if p.DNS.Mode != namewire.PolicyModeAudit {
			return true
		}
	}
	return false
}
