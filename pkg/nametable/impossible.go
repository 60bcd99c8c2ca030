package nametable

import "github.com/miekg/dns"

// impossible answers a question whose name lowerKey refused because it has
// an escape: a byte no table name holds (a space, NUL, a dot inside a
// label, anything outside printable ASCII; dns.Msg presents each as '\').
// Inside an authoritative zone such a name cannot exist, so it gets the
// zone's NXDOMAIN like any other unknown name there, instead of leaking
// the query upstream. A wildcard covering the name would match it in a
// real zone (RFC 4592 puts no limit on the bytes of the label it stands
// for), so then, and outside the zones, the question is forwarded as
// before.
func (t *Table) impossible(name string) Result {
	suffix, ok := cleanSuffix(name)
	if !ok {
		return Result{Action: Forward}
	}
	var buf [maxName + 2]byte
	key, ok := lowerKey(&buf, suffix)
	if !ok {
		return Result{Action: Forward}
	}
	z := t.zoneOf(key)
	if z == nil {
		return Result{Action: Forward}
	}
	for d := key; ; {
		if _, ok := t.wild[string(d)]; ok {
			return Result{Action: Forward}
		}
		i := 0
		for i < len(d) && d[i] != '.' {
			i++
		}
		if i == len(d) {
			break
		}
		d = d[i+1:]
	}
	return Result{Action: Answer, Rcode: dns.RcodeNameError, Ns: z.soa}
}

// cleanSuffix returns the labels of a presentation-form name after the
// last label holding an escape ("\ ", "\.", "\000"); ok is false when
// there is no such label or nothing follows it.
func cleanSuffix(name string) (string, bool) {
	last := -1 // end (the dot) of the last label with an escape
	escaped := false
	for i := 0; i < len(name); i++ {
		switch name[i] {
		case '\\':
			escaped = true
			i++ // the escaped byte, or the first digit of \DDD
		case '.':
			if escaped {
				last, escaped = i, false
			}
		}
	}
	if last < 0 || escaped || last+1 >= len(name) {
		return "", false
	}
	return name[last+1:], true
}
