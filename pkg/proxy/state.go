package proxy

import "strings"

// The table and policy a Handler answers from: one tableState, swapped
// whole, so a query sees the names and the policy of one version.

// SetTable makes t the table answers come from, with an empty answer
// cache, under the policy being enforced (SetTablePolicy changes both). A
// nil t goes back to the state before the first table (pass nil itself: a
// nil pointer inside a Lookuper is a table that panics).
func (h *Handler) SetTable(t Lookuper) { h.SetTablePolicy(t, h.Policy()) }

// SetTablePolicy makes t the table and p the policy answers come from, in
// one atomic store: no query sees the new names under the old policy or
// the reverse. A nil p turns the policy off. SetTable keeps the policy
// being enforced.
func (h *Handler) SetTablePolicy(t Lookuper, p *Policy) {
	st := newTableState(t, h.maxAnswers, h.maxAnswerBytes)
	st.pol, st.zoneAllowed = p, h.zoneAllowed(p)
	st.ownsCluster = p != nil && h.ownsCluster(t)
	h.state.Store(st)
	h.ready.Store(t != nil)
}

// Policy returns the policy being enforced, or nil.
func (h *Handler) Policy() *Policy { return h.state.Load().pol }

// zoneAllowed is p.allowsZone for the cluster domain, remembered for the
// last policy set.
func (h *Handler) zoneAllowed(p *Policy) bool {
	if p == nil {
		return false
	}
	h.zoneMemo.Lock()
	defer h.zoneMemo.Unlock()
	if h.zoneMemo.p != p {
		h.zoneMemo.p, h.zoneMemo.allowed = p, p.allowsZone(strings.TrimSuffix(wireName(h.zone), "."))
	}
	return h.zoneMemo.allowed
}

// ownsCluster reports whether the table t is complete for the cluster
// domain: one of its zones (nametable.Table.Zones) is the cluster domain
// or above it. A control plane with a Kubernetes source sends the cluster
// domain as a zone (unless --fallthrough); a file-only or VM control plane
// does not. A Lookuper that does not say its zones owns none.
func (h *Handler) ownsCluster(t Lookuper) bool {
	z, ok := t.(interface{ Zones() []string })
	if !ok {
		return false
	}
	zone := strings.TrimSuffix(wireName(h.zone), ".")
	for _, s := range z.Zones() {
		if below(zone, strings.ToLower(strings.TrimSuffix(s, "."))) {
			return true
		}
	}
	return false
}
