// Package dnsname is the one check of the hostnames meshdns accepts, used
// wherever a name enters: the file source, the agent's table conversion and
// the name table itself, so a name one of them accepts is never refused by
// another.
package dnsname

import (
	"errors"
	"fmt"
	"strings"
)

const (
	// MaxName is the longest name in presentation form without the
	// trailing dot (RFC 1035 3.1: 255 bytes in wire form).
	MaxName = 253
	// MaxLabel is the longest label (RFC 1035 2.3.4).
	MaxLabel = 63
)

// Check reports whether name (any case, with or without the trailing dot)
// is a hostname meshdns accepts: at most 253 characters; labels of 1 to 63
// letters, digits, '-' and '_' (service and SRV labels), not starting or
// ending with '-' (RFC 952, 1123). With wildcard, a first label "*"
// followed by a domain is allowed too.
func Check(name string, wildcard bool) error {
	if plain(name) {
		return nil
	}
	return check(name, wildcard)
}

// plain reports, in one pass over the bytes, whether name is a hostname
// Check accepts without a wildcard. Every name of a table is checked, by
// the agent's converter and again by the table: the label by label check
// cost twice as much. When it is false, check decides and says why.
func plain(name string) bool {
	n := len(name)
	if n > 0 && name[n-1] == '.' {
		n--
	}
	if n == 0 || n > MaxName {
		return false
	}
	start := 0 // of the label
	for i := 0; i <= n; i++ {
		if i < n && name[i] != '.' {
			if !hostByte[name[i]] {
				return false
			}
			continue
		}
		if l := i - start; l == 0 || l > MaxLabel || name[start] == '-' || name[i-1] == '-' {
			return false
		}
		start = i + 1
	}
	return true
}

// hostByte holds the bytes of a label: letters, digits, '-' and '_'.
var hostByte = func() (t [256]bool) {
	for c := range 256 {
		t[c] = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
	}
	return t
}()

// check is Check label by label, with the reason of a refusal.
func check(name string, wildcard bool) error {
	n := strings.TrimSuffix(name, ".")
	switch {
	case n == "":
		return errors.New("empty name")
	case len(n) > MaxName:
		return fmt.Errorf("name longer than %d characters", MaxName)
	}
	rest := n
	for i := 0; ; i++ {
		label, tail, more := strings.Cut(rest, ".")
		if label == "*" && i == 0 && wildcard {
			if !more {
				return errors.New(`wildcard needs a domain after "*."`)
			}
		} else if err := CheckLabel(label); err != nil {
			return err
		}
		if !more {
			return nil
		}
		rest = tail
	}
}

// CheckLabel reports whether l is a label Check accepts (never "*").
func CheckLabel(l string) error {
	switch {
	case l == "":
		return errors.New("empty label")
	case len(l) > MaxLabel:
		return fmt.Errorf("label %.20q... longer than %d characters", l, MaxLabel)
	case l == "*":
		return errors.New(`wildcard "*" allowed only as the first label`)
	case l[0] == '-' || l[len(l)-1] == '-':
		return fmt.Errorf("label %q starts or ends with '-'", l)
	}
	for i := 0; i < len(l); i++ {
		c := l[i]
		if (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' {
			continue
		}
		return fmt.Errorf("label %q: character %q not allowed", l, c)
	}
	return nil
}
