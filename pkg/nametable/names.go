package nametable

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"unsafe"

	"github.com/meshdns/meshdns/internal/dnsname"
)

const (
	maxLabel = dnsname.MaxLabel
	maxName  = dnsname.MaxName
)

var errLongName = errors.New("name longer than 253 characters")

// normalizeName checks name with the one hostname check of meshdns
// (internal/dnsname), then lowercases it and drops one trailing dot.
func normalizeName(name string, wildcard bool) (string, error) {
	if err := dnsname.Check(name, wildcard); err != nil {
		return "", err
	}
	return strings.ToLower(strings.TrimSuffix(name, ".")), nil
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

// stringBytes views s as bytes, for lookups with a string key; the bytes
// must not be written.
func stringBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }
