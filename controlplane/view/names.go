package view

import (
	"maps"

	"github.com/meshdns/meshdns/controlplane/registry"
)

// names is the immutable name -> entry map of one version, stored as a
// base map shared with earlier versions plus a small overlay of the
// changes since. A version that changes one name would otherwise copy the
// whole map: with 100 views of 10,000 names, copying cost more CPU per
// update (and as much again in garbage collection) than sending it to
// 1,000 agents. The overlay is folded into a new base once it holds more
// than an eighth of the names, so lookups stay two map probes and the
// copies are amortised over many versions.
type names struct {
	base map[string]*registry.Candidate // shared; never modified
	// over maps changed names to their entry, nil for removed ones;
	// owned by this version (copied, not shared, when changed).
	over map[string]*registry.Candidate
	n    int // names present
}

func namesOf(m map[string]*registry.Candidate) names {
	return names{base: m, n: len(m)}
}

// get returns the entry of k, or nil.
func (ns *names) get(k string) *registry.Candidate {
	if c, ok := ns.over[k]; ok {
		return c
	}
	return ns.base[k]
}

func (ns *names) len() int { return ns.n }

// each calls f for every name, in no particular order.
func (ns *names) each(f func(k string, c *registry.Candidate)) {
	for k, c := range ns.base {
		if _, changed := ns.over[k]; !changed {
			f(k, c)
		}
	}
	for k, c := range ns.over {
		if c != nil {
			f(k, c)
		}
	}
}

// with returns the names with the changes applied (nil: remove); ns is not
// modified.
func (ns *names) with(changes map[string]*registry.Candidate) names {
	out := names{base: ns.base, n: ns.n}
	if len(ns.over)+len(changes) > len(ns.base)/8 {
		// Fold: one copy now instead of an ever larger overlay.
		out.base = make(map[string]*registry.Candidate, ns.n+len(changes))
		ns.each(func(k string, c *registry.Candidate) { out.base[k] = c })
		for k, c := range changes {
			if c == nil {
				delete(out.base, k)
			} else {
				out.base[k] = c
			}
		}
		out.n = len(out.base)
		return out
	}
	out.over = make(map[string]*registry.Candidate, len(ns.over)+len(changes))
	maps.Copy(out.over, ns.over)
	for k, c := range changes {
		had := ns.get(k) != nil
		switch {
		case c == nil && had:
			out.n--
		case c != nil && !had:
			out.n++
		}
		if c == nil {
			if _, inBase := ns.base[k]; !inBase {
				delete(out.over, k) // never in base: nothing to hide
				continue
			}
		}
		out.over[k] = c
	}
	return out
}

// toMap returns the names as one map (a copy).
func (ns *names) toMap() map[string]*registry.Candidate {
	m := make(map[string]*registry.Candidate, ns.n)
	ns.each(func(k string, c *registry.Candidate) { m[k] = c })
	return m
}
