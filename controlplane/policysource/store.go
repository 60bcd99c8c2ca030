package policysource

import (
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/meshdns/meshdns/controlplane/auth"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// Feature is the AgentSettings.requires name of a policy: an agent that
// does not enforce policies must refuse a version carrying one.
const Feature = "policy"

// Store holds the valid policies of every origin (the Kubernetes watch,
// policy files) and the labels of the pods a selector must be evaluated
// for, and answers which policy each agent is sent. It is the policy part
// of the per-agent settings (agentsettings.Part): Fill reads caches only,
// Changed says when a result may have changed. Safe for concurrent use.
type Store struct {
	mu sync.Mutex // guards following
	// origins holds each origin's policies, as last set.
	origins map[string][]Policy
	// byNS holds the policies of all origins per namespace, sorted by
	// name (then origin order), rebuilt by SetPolicies.
	byNS map[string][]Policy
	// refused holds the policies of each origin left out of byNS for
	// their namespace's rule budget (budget.go), by "namespace/name",
	// rebuilt by SetPolicies.
	refused map[string]map[string]error
	// labelNS is LabelNamespaces' list, rebuilt by SetPolicies.
	labelNS []string
	// pods holds the labels of pods by namespace and name, only for the
	// namespaces of labelNS (others need none).
	pods map[string]map[string]labels.Set
	// merged caches Fill's policy by namespace and the indices of the
	// policies selected ("ns\x000,3"); SetPolicies drops the entries of
	// the namespaces it changes. The values are shared, read-only.
	merged map[string]*meshdnsv1.DNSPolicy
	// changed is closed at the next change of a Fill result, need at
	// the next change of LabelNamespaces, budget at the next change of
	// refused; each then replaced.
	changed, need, budget chan struct{}
}

// NewStore returns an empty store: no policy, every agent ungoverned.
func NewStore() *Store {
	return &Store{origins: map[string][]Policy{}, byNS: map[string][]Policy{}, pods: map[string]map[string]labels.Set{},
		merged: map[string]*meshdnsv1.DNSPolicy{}, changed: make(chan struct{}), need: make(chan struct{}), budget: make(chan struct{})}
}

// SetPolicies replaces the policies of one origin ("kubernetes", "file").
// Policies of all origins apply together; an object of the same namespace
// and name in two origins applies twice (its rules merge with themselves).
// The policies of a namespace whose rules together would be more than one
// policy may have are admitted oldest first; the others are refused
// (Refused says why).
func (s *Store) SetPolicies(origin string, ps []Policy) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if samePolicies(s.origins[origin], ps) {
		return
	}
	s.origins[origin] = slices.Clone(ps)
	old := s.byNS
	origins := slices.Sorted(maps.Keys(s.origins))
	cand := map[string][]origined{}
	for i, o := range origins {
		for _, p := range s.origins[o] {
			cand[p.Namespace] = append(cand[p.Namespace], origined{p, i})
		}
	}
	s.byNS = map[string][]Policy{}
	oldRefused := s.refused
	s.refused = map[string]map[string]error{}
	for ns, l := range cand {
		s.byNS[ns] = admit(l, origins, s.refused) // budget.go
	}
	if !sameRefusals(oldRefused, s.refused) {
		close(s.budget)
		s.budget = make(chan struct{})
	}
	// Only the namespaces whose policies changed lose their merged
	// policies: the others keep the same shared messages (encoded once
	// by agentsettings per message).
	for key := range s.merged {
		ns, _, _ := strings.Cut(key, "\x00")
		if !samePolicies(old[ns], s.byNS[ns]) {
			delete(s.merged, key)
		}
	}
	after := s.labelNamespacesLocked()
	for ns := range s.pods {
		if !slices.Contains(after, ns) {
			delete(s.pods, ns) // nothing selects by label there any more
		}
	}
	if !slices.Equal(s.labelNS, after) {
		s.labelNS = after
		close(s.need)
		s.need = make(chan struct{})
	}
	s.changedLocked()
}

// Refused returns the policies of origin that SetPolicies left out for
// their namespace's rule budget, by "namespace/name", each with the error
// that says why; nil for none. The map is the caller's.
func (s *Store) Refused(origin string) map[string]error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.refused[origin])
}

// BudgetChanged returns a channel closed at the next change of what
// Refused returns for some origin: a change of one origin may refuse or
// admit the policies of another.
func (s *Store) BudgetChanged() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.budget
}

// sameRefusals reports whether a and b refuse the same policies for the
// same reasons.
func sameRefusals(a, b map[string]map[string]error) bool {
	return maps.EqualFunc(a, b, func(x, y map[string]error) bool {
		return maps.EqualFunc(x, y, func(e, f error) bool { return e.Error() == f.Error() })
	})
}

// samePolicies reports whether a and b would give every agent the same
// policy, so a resync or an unrelated status update wakes nobody.
func samePolicies(a, b []Policy) bool {
	return slices.EqualFunc(a, b, func(x, y Policy) bool {
		return x.Namespace == y.Namespace && x.Name == y.Name && x.Selector.String() == y.Selector.String() &&
			reflect.DeepEqual(x.DNS, y.DNS)
	})
}

// LabelNamespaces returns the namespaces (sorted) where some policy
// selects pods by label, so their pods' labels are needed, and a channel
// closed when that list changes.
func (s *Store) LabelNamespaces() ([]string, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.labelNS), s.need
}

func (s *Store) labelNamespacesLocked() []string {
	var out []string
	for ns, ps := range s.byNS {
		if slices.ContainsFunc(ps, func(p Policy) bool { return !p.Selector.Empty() }) {
			out = append(out, ns)
		}
	}
	slices.Sort(out)
	return out
}

// ForgetPods forgets the labels of namespace ns's pods (its watch
// stopped).
func (s *Store) ForgetPods(ns string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.pods, ns)
}

// SetPod records the labels of one pod (added or changed), or with l nil
// forgets the pod (deleted). Changed fires only when the policies that
// select the pod change.
func (s *Store) SetPod(ns, name string, l labels.Set) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !slices.Contains(s.labelNS, ns) {
		return // no selector needs them (any more)
	}
	pods, ok := s.pods[ns]
	if !ok {
		pods = map[string]labels.Set{}
		s.pods[ns] = pods
	}
	before := s.selectionKeyLocked(ns, pods[name])
	if l == nil {
		delete(pods, name)
	} else {
		pods[name] = l
	}
	if s.selectionKeyLocked(ns, l) != before {
		s.changedLocked()
	}
}

func (s *Store) changedLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// selectionKeyLocked names the policies of ns that select a pod with
// labels l by their indices in byNS[ns], "0,3"; "" for none. Keys are
// comparable only until the next SetPolicies (which empties merged).
func (s *Store) selectionKeyLocked(ns string, l labels.Set) string {
	var b []byte
	for i, p := range s.byNS[ns] {
		if p.Selector.Matches(l) {
			if len(b) > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, int64(i), 10)
		}
	}
	return string(b)
}

// Fill sets s.Policy to the merged policies that select the agent's pod
// (nil when none does) and adds Feature to s.Requires when it sets one.
// A pod whose labels are not known (not listed yet, or a credential that
// names no pod: SPIFFE, whose pod name is only claimed) is judged with no
// labels: namespace-wide policies apply,
// label selectors match only as they match an empty set. The policy
// message is shared between agents and must not be modified.
func (s *Store) Fill(id auth.Identity, st *meshdnsv1.AgentSettings) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var l labels.Set
	if id.Method != auth.MethodSPIFFE {
		// A SPIFFE certificate names a service account, not a pod: the
		// pod name beside it is the agent's claim, which must not pick
		// the labels it is judged by.
		l = s.pods[id.Namespace][id.Pod]
	}
	key := s.selectionKeyLocked(id.Namespace, l)
	if key == "" {
		st.Policy = nil
		return
	}
	p, ok := s.merged[id.Namespace+"\x00"+key]
	if !ok {
		p = toProto(Merge(Selecting(s.byNS[id.Namespace], id.Namespace, l)))
		s.merged[id.Namespace+"\x00"+key] = p
	}
	st.Policy = p
	if !slices.Contains(st.Requires, Feature) {
		st.Requires = append(st.Requires, Feature)
	}
}

// Changed returns a channel closed at the next change that may alter
// Fill's result for some agent.
func (s *Store) Changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}
