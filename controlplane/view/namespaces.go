package view

import "github.com/meshdns/meshdns/controlplane/registry"

// Shared is the namespace of the one view every namespace no source names
// subscribes to. What such a namespace may see is exactly what every
// namespace sees (no entry is restricted to it, it has no services), so
// one view serves them all, and a client claiming invented namespaces
// creates no views: before, 400 invented namespaces cost the control plane
// 400 views, ~590 MB with a big table.
const Shared = ""

// namespaces counts, per namespace, the candidates of the model that name
// it (as a service's namespace or in an entry's namespaces). Updated from
// the names a model touched, so a change costs what it changed.
type namespaces struct {
	count map[string]int
}

// apply moves the index from prev to m and returns the namespaces that
// were not named before and are now.
func (x *namespaces) apply(prev, m *registry.Model) (added []string) {
	if x.count == nil || prev == nil || m.Touched == nil || prev.Version+1 != m.Version {
		old := x.count
		x.count = map[string]int{}
		for _, cs := range m.Names {
			x.add(cs, 1)
		}
		for ns := range x.count {
			if old[ns] == 0 {
				added = append(added, ns)
			}
		}
		return added
	}
	for host := range m.Touched {
		x.add(prev.Names[host], -1)
	}
	for host := range m.Touched {
		for _, c := range m.Names[host] {
			for _, ns := range candidateNamespaces(c) {
				if x.count[ns] == 0 {
					added = append(added, ns)
				}
				x.count[ns]++
			}
		}
	}
	return added
}

func (x *namespaces) add(cs []*registry.Candidate, d int) {
	for _, c := range cs {
		for _, ns := range candidateNamespaces(c) {
			if x.count[ns] += d; x.count[ns] <= 0 {
				delete(x.count, ns)
			}
		}
	}
}

func candidateNamespaces(c *registry.Candidate) []string {
	if n := c.Info.GetNamespace(); n != "" {
		return append([]string{n}, c.Namespaces...)
	}
	return c.Namespaces
}

// canonicalLocked maps key to the view that serves it: the shared view
// for a namespace the model does not name. Called with s.mu held.
func (s *Store) canonicalLocked(key Key) Key {
	if s.ns.count[key.Namespace] == 0 {
		key.Namespace = Shared
	}
	return key
}

// rebindLocked tells the subscribers of shared views whose namespace the
// model now names to resubscribe: their namespace has its own view now
// (an entry restricted to it appeared). Called with s.mu held.
func (s *Store) rebindLocked(added []string) {
	if len(added) == 0 {
		return
	}
	named := make(map[string]bool, len(added))
	for _, ns := range added {
		named[ns] = true
	}
	for key, v := range s.views {
		if key.Namespace != Shared {
			continue
		}
		v.mu.Lock()
		for sub := range v.subs {
			if named[sub.namespace] && !sub.rebind.Swap(true) {
				sub.wake()
			}
		}
		v.mu.Unlock()
	}
}

// Rebind reports whether the subscriber must close this subscription and
// subscribe again: its namespace now has a view of its own.
func (s *Sub) Rebind() bool { return s.rebind.Load() }

// Len returns the number of views held (live and idle).
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.views)
}
