package forwardsource

import (
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/meshdns/meshdns/controlplane/agentsettings"
	"github.com/meshdns/meshdns/controlplane/auth"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// PodLabels returns the labels of a pod from a cache, and false when they
// are not known (yet).
type PodLabels func(namespace, pod string) (labels.Set, bool)

// Part fills AgentSettings.forwarding: the rules that select the agent's
// pod, in file order. A domain two selected rules name goes by the first.
// Safe for concurrent use.
type Part struct {
	agentsettings.Notifier
	labels PodLabels // or nil: rules with a podSelector select no pod

	mu    sync.Mutex // guards following
	rules []Rule
}

var _ agentsettings.Part = (*Part)(nil)

// NewPart returns a part without rules. podLabels, when not nil, lets
// rules with a podSelector select pods; without it (or for a pod whose
// labels are not known, or an agent whose credential names no pod) such
// rules select nothing: a stub domain for some pods must not reach others.
func NewPart(podLabels PodLabels) *Part {
	return &Part{labels: podLabels}
}

// Set replaces the rules and announces the change.
func (p *Part) Set(rules []Rule) {
	p.mu.Lock()
	p.rules = slices.Clone(rules)
	p.mu.Unlock()
	p.Notify()
}

// Fill sets s.forwarding for the agent id.
func (p *Part) Fill(id auth.Identity, s *meshdnsv1.AgentSettings) {
	p.mu.Lock()
	rules := p.rules
	p.mu.Unlock()
	s.Forwarding = nil
	var (
		podLabels labels.Set
		known     bool
		looked    bool
		taken     = map[string]bool{}
	)
	for _, r := range rules {
		if len(r.Namespaces) > 0 && !slices.Contains(r.Namespaces, id.Namespace) {
			continue
		}
		if r.Selector != nil {
			if !looked {
				looked = true
				// A SPIFFE certificate names a service account, not a
				// pod: the pod beside it is the agent's claim, which must
				// not pick the labels it is judged by.
				if p.labels != nil && id.Pod != "" && id.Method != auth.MethodSPIFFE {
					podLabels, known = p.labels(id.Namespace, id.Pod)
				}
			}
			if !known || !r.Selector.Matches(podLabels) {
				continue
			}
		}
		fr := &meshdnsv1.ForwardRule{Upstreams: slices.Clone(r.Upstreams), Source: "file/" + r.Name}
		for _, d := range r.Domains {
			if !taken[d] {
				taken[d] = true
				fr.Domains = append(fr.Domains, d)
			}
		}
		if len(fr.Domains) > 0 {
			s.Forwarding = append(s.Forwarding, fr)
		}
	}
}
