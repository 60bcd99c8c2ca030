package nametable

import (
	"slices"
	"strings"
)

// Len returns how many names the table knows without deriving them:
// hostnames, alt hosts, wildcards, endpoint and reverse names, empty
// non-terminals. Names derived
// at query time are not counted: SRV owners of named ports, alternate and
// search-path names.
func (t *Table) Len() int {
	if t == nil {
		return 0
	}
	return t.st.Len() + len(t.wild) + t.revAddrs - t.revStored
}

// Names returns every name the table answers as written, sorted,
// lowercase without trailing dot, wildcards with their "*." prefix: the
// stored names plus the SRV owners of named ports (_http._tcp.<service>)
// and the protocol names above them (_tcp.<service>). Not the alternate
// and search-path names. It allocates: for debug dumps only.
func (t *Table) Names() []string {
	if t == nil {
		return nil
	}
	out := make([]string, 0, t.Len())
	seen := make(map[string]bool)
	t.st.Each(func(k string, n *node) {
		out = append(out, k)
		for _, p := range t.shapeOf(n).ports {
			o := p.label + strings.TrimSuffix(t.canonical(n), ".")
			if p.label == "" || seen[o] {
				continue
			}
			seen[o] = true
			out = append(out, o)
			if p := parent(o); !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	})
	t.eachReverse(func(k [16]byte) {
		if name := revKey(k); t.st.Lookup(stringBytes(name)) == nil {
			out = append(out, name)
		}
	})
	for k := range t.wild {
		out = append(out, "*."+k)
	}
	slices.Sort(out)
	return out
}

// Context returns the context the table was built for, normalized:
// lowercase, no trailing dots, defaults filled in.
func (t *Table) Context() Context {
	if t == nil {
		return Context{}
	}
	c := t.pod
	c.Search = slices.Clone(c.Search)
	return c
}

// Zones returns the zones the table is complete for, normalized.
func (t *Table) Zones() []string {
	if t == nil {
		return nil
	}
	out := make([]string, 0, len(t.zones))
	for _, z := range t.zones {
		out = append(out, z.name)
	}
	return out
}

// AlternateNames returns the names a stored name also answers to by the
// Kubernetes alternate-name rule (svc.ns, svc.ns.svc and, in the pod's
// namespace, svc), or nil. name is lowercase without the
// trailing dot. Lookup's findAlt is the rule; this is its inverse, for
// debug dumps only.
func (t *Table) AlternateNames(name string) []string {
	if t == nil || t.altNs == "" {
		return nil
	}
	n := t.st.Lookup(stringBytes(name))
	if n == nil || !n.is(flagAlt) {
		return nil
	}
	var out []string
	for _, suffix := range [...]string{t.altNs, t.altSvc, t.altBare} {
		if short, ok := strings.CutSuffix(name, suffix); ok && suffix != "" && short != "" {
			if t.findAlt([]byte(short), false) == n {
				out = append(out, short)
			}
		}
	}
	return out
}
