package agent

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// ResolvConf is what the agent takes from a resolv.conf(5) file.
type ResolvConf struct {
	// Nameservers as host:port (port 53; IPv6 in brackets, a scope such as
	// %eth0 kept), in file order.
	Nameservers []string
	// Search domains without trailing dots, in file order. A later search or
	// domain line replaces earlier ones, as in glibc.
	Search []string
	// Ndots from "options ndots:n"; 1 when absent (the glibc default),
	// capped at 15 like glibc.
	Ndots int
}

// maxResolvConf bounds what is read: a real file is a few hundred bytes,
// so anything bigger is not a resolv.conf.
const maxResolvConf = 64 << 10

// ParseResolvConf parses resolv.conf text. Unknown keywords and options are
// ignored like the libc resolver does; a nameserver that is not an IP
// address is an error, because silently dropping the only upstream would
// turn every forwarded query into SERVFAIL with no clue why.
func ParseResolvConf(data []byte) (ResolvConf, error) {
	rc := ResolvConf{Ndots: 1}
	if len(data) > maxResolvConf {
		return rc, fmt.Errorf("resolv.conf: %d bytes is larger than %d", len(data), maxResolvConf)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 1024), maxResolvConf)
	line := 0
	for sc.Scan() {
		line++
		text := sc.Text()
		// Comments start with # or ; anywhere on the line (glibc accepts
		// both at the line start; resolvers written since accept both inline).
		if i := strings.IndexAny(text, "#;"); i >= 0 {
			text = text[:i]
		}
		f := strings.Fields(text)
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "nameserver":
			if len(f) < 2 {
				return rc, fmt.Errorf("resolv.conf line %d: nameserver without address", line)
			}
			ns, err := nameserverAddr(f[1])
			if err != nil {
				return rc, fmt.Errorf("resolv.conf line %d: %w", line, err)
			}
			rc.Nameservers = append(rc.Nameservers, ns)
		case "search", "domain":
			rc.Search = rc.Search[:0]
			for _, d := range f[1:] {
				d = strings.TrimSuffix(d, ".")
				if d == "" {
					continue
				}
				rc.Search = append(rc.Search, strings.ToLower(d))
			}
		case "options":
			for _, o := range f[1:] {
				v, ok := strings.CutPrefix(o, "ndots:")
				if !ok {
					continue
				}
				n, err := strconv.Atoi(v)
				if err != nil || n < 0 {
					return rc, fmt.Errorf("resolv.conf line %d: bad option %q", line, o)
				}
				rc.Ndots = min(n, 15)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return rc, fmt.Errorf("resolv.conf: %w", err)
	}
	if len(rc.Search) == 0 {
		rc.Search = nil
	}
	return rc, nil
}

// nameserverAddr turns a nameserver value (an IP, possibly with a scope)
// into host:port.
func nameserverAddr(s string) (string, error) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return "", fmt.Errorf("nameserver %q is not an IP address", s)
	}
	return net.JoinHostPort(a.String(), "53"), nil
}
