package policy

// The matcher keeps, per rule index, only what decide needs: the winning
// action of a pattern is resolved when compiling, so a lookup is one exact
// probe and one probe per label boundary.

// ruleAction is the action of rule i as compiled.
func (p *Policy) ruleAction(i int32) Action { return p.actions[i] }

// match returns the deciding rule for name, if any. The name is lowercased
// into a stack buffer; map lookups keyed by string(buf[...]) do not
// allocate. Label boundaries are unescaped dots only, so "a\.b.evil.com"
// lies below evil.com as its labels say.
func match[N string | []byte](p *Policy, qname N) (int32, bool) {
	n := len(qname)
	if n > 0 && qname[n-1] == '.' && boundary(qname, n-1) {
		n--
	}
	switch {
	case n == 0 || n > maxPresentation:
		return 0, false
	case n <= maxUnescaped:
		// Nearly every name: a smaller buffer is less to zero per call.
		var buf [maxUnescaped]byte
		return matchIn(p, qname, buf[:n])
	}
	var buf [maxPresentation]byte
	return matchIn(p, qname, buf[:n])
}

// matchIn matches the first len(name) bytes of qname, lowercased into name.
func matchIn[N string | []byte](p *Policy, qname N, name []byte) (int32, bool) {
	n := len(name)
	for i := 0; i < n; i++ {
		c := qname[i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		name[i] = c
	}
	if i, ok := p.exact[string(name)]; ok {
		return i, true
	}
	if len(p.wildcard) == 0 {
		return 0, false
	}
	// Walk the label boundaries left to right: the first suffix found is
	// the longest domain the name lies strictly below.
	for i := 0; i < n; i++ {
		switch name[i] {
		case '\\':
			i++ // skip the escaped character; \DDD digits are never '.'
		case '.':
			if i+1 < n {
				if r, ok := p.wildcard[string(name[i+1:])]; ok {
					return r, true
				}
			}
		}
	}
	return 0, false
}

// boundary reports whether the dot at qname[i] is a label boundary, that
// is preceded by an even number of backslashes.
func boundary[N string | []byte](qname N, i int) bool {
	k := 0
	for j := i - 1; j >= 0 && qname[j] == '\\'; j-- {
		k++
	}
	return k%2 == 0
}

// maxPresentation bounds a name in presentation form: 255 wire bytes, each
// at most 4 characters when escaped (\DDD). Longer input matches nothing.
const maxPresentation = 1024

// maxUnescaped is the longest name without escapes (253) rounded up.
const maxUnescaped = 256
