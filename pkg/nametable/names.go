package nametable

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// RFC 1035 section 2.3.4: 63 octets per label; 255 octets on the wire is
// 253 characters in presentation form without the trailing dot.
const (
	maxLabel = 63
	maxName  = 253
)

var (
	errEmptyName = errors.New("empty name")
	errLongName  = errors.New("name longer than 253 characters")
)

// normalizeName lowercases name, drops one trailing dot and checks it is a
// hostname we can serve: labels of 1-63 letters, digits, '-' (not first or
// last) or '_' (underscore for SRV owners such as _http._tcp). With wildcard, a leading
// "*" label is allowed; a "*" anywhere else is an error.
func normalizeName(name string, wildcard bool) (string, error) {
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	if name == "" {
		return "", errEmptyName
	}
	if len(name) > maxName {
		return "", errLongName
	}
	rest := name
	for i := 0; ; i++ {
		label, tail, more := strings.Cut(rest, ".")
		if err := checkLabel(label, wildcard && i == 0); err != nil {
			return "", err
		}
		if !more {
			if i == 0 && label == "*" {
				return "", errors.New("wildcard needs a domain after \"*.\"")
			}
			break
		}
		rest = tail
	}
	return name, nil
}

// checkLabel checks one lowercase label.
func checkLabel(label string, wildcard bool) error {
	switch {
	case label == "":
		return errors.New("empty label")
	case len(label) > maxLabel:
		return fmt.Errorf("label %.20q... longer than 63 characters", label)
	case label == "*":
		if wildcard {
			return nil
		}
		return errors.New("wildcard \"*\" allowed only as the first label")
	case label[0] == '-' || label[len(label)-1] == '-':
		// The agent and file source reject these too; a name one checker
		// accepts must not be refused by another.
		return fmt.Errorf("label %q starts or ends with '-'", label)
	}
	for i := 0; i < len(label); i++ {
		c := label[i]
		if (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' {
			continue
		}
		return fmt.Errorf("label %q: character %q not allowed", label, c)
	}
	return nil
}

// checkGenerated checks a name built from validated parts (SRV owner,
// endpoint name): only its total length can be wrong.
func checkGenerated(name string) error {
	if len(name) > maxName {
		return fmt.Errorf("generated name %.40q...: %w", name, errLongName)
	}
	return nil
}

// checkAddr rejects addresses a DNS answer cannot carry.
func checkAddr(a netip.Addr) (netip.Addr, error) {
	if !a.IsValid() {
		return a, errors.New("invalid IP address")
	}
	if a.Zone() != "" {
		return a, fmt.Errorf("IP %s: zoned addresses have no DNS form", a)
	}
	// An IPv4-mapped IPv6 address is an IPv4 address in disguise; answer
	// it as A so clients of either family see what they expect.
	return a.Unmap(), nil
}

// dashedLabel is the label Kubernetes DNS derives for an endpoint without a
// hostname: the IP with '.' or ':' replaced by '-' (10-0-0-3, fd00--3).
func dashedLabel(a netip.Addr) string {
	s := a.String()
	if a.Is4() {
		return strings.ReplaceAll(s, ".", "-")
	}
	return strings.ReplaceAll(s, ":", "-")
}

// inZone reports whether name (lowercase, no trailing dot) is zone or below it.
func inZone(name, zone string) bool {
	return name == zone || (len(name) > len(zone) && name[len(name)-len(zone)-1] == '.' && name[len(name)-len(zone):] == zone)
}

// parent returns name without its first label, or "" for a single label.
func parent(name string) string {
	_, p, ok := strings.Cut(name, ".")
	if !ok {
		return ""
	}
	return p
}

// lowerKey writes name lowercased, without its trailing dot, into buf and
// returns the written bytes. ok is false for names the table never holds
// and that no DNS message can carry: the root, names over 253 characters,
// empty labels or labels over 63 characters, and names with escapes ('\\'),
// whose label boundaries a byte scan cannot see. Only ASCII letters are
// folded (RFC 4343: DNS case-insensitivity is ASCII only).
func lowerKey(buf *[maxName + 2]byte, name string) (key []byte, ok bool) {
	n := len(name)
	if n > 0 && name[n-1] == '.' {
		n--
	}
	if n == 0 || n > maxName {
		return nil, false
	}
	label := 0
	for i := 0; i < n; i++ {
		c := name[i]
		switch {
		case c >= 'A' && c <= 'Z':
			c += 'a' - 'A'
		case c == '.':
			if label == 0 {
				return nil, false
			}
			label = -1
		case c == '\\':
			return nil, false
		}
		if label++; label > maxLabel {
			return nil, false
		}
		buf[i] = c
	}
	return buf[:n], true
}
