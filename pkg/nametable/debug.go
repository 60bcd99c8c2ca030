package nametable

import "slices"

// Len returns how many names the table stores (including wildcards,
// generated SRV, endpoint and reverse names, and empty non-terminals; not
// the alternate and search-path names derived at query time).
func (t *Table) Len() int {
	if t == nil {
		return 0
	}
	return len(t.names) + len(t.wild)
}

// Names returns every stored name, sorted, lowercase without trailing dot;
// wildcards with their "*." prefix. It allocates: for debug dumps only.
func (t *Table) Names() []string {
	if t == nil {
		return nil
	}
	out := make([]string, 0, t.Len())
	for k := range t.names {
		out = append(out, k)
	}
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
	c := t.ctx
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
