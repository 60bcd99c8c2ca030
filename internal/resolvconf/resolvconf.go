// Package resolvconf parses resolv.conf(5) files: the one parser of the
// agent (upstreams, search list, ndots) and of the capture rules (which
// nameservers to redirect). It uses the standard library only, because
// iptables/ may import nothing else.
package resolvconf

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
)

// MaxSize bounds what is read: a real file is a few hundred bytes, so
// anything bigger is not a resolv.conf.
const MaxSize = 64 << 10

// Config is what meshdns takes from a resolv.conf file.
type Config struct {
	// Nameservers in file order, duplicates and scopes (%eth0) kept.
	Nameservers []netip.Addr
	// Search domains, lower case, without trailing dots, in file order;
	// nil when none. A later search or domain line replaces earlier ones,
	// as in glibc.
	Search []string
	// Ndots from "options ndots:n"; 1 when absent (the glibc default),
	// capped at 15 like glibc.
	Ndots int
	// Timeout from "options timeout:n" in seconds: how long the libc
	// resolver waits for a reply before it asks again; 5 when absent (the
	// glibc default RES_TIMEOUT), capped at 30 like glibc.
	Timeout int
}

// Parse parses resolv.conf text. Unknown keywords and options are ignored
// as the libc resolver does. A nameserver that is not an IP address is an
// error: silently dropping the only upstream would turn every forwarded
// query into SERVFAIL with no clue why, and capturing fewer nameservers
// than the pod uses would let some of its queries bypass the agent.
func Parse(data []byte) (Config, error) {
	rc := Config{Ndots: 1, Timeout: 5}
	if len(data) > MaxSize {
		return rc, fmt.Errorf("resolv.conf: %d bytes is larger than %d", len(data), MaxSize)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 1024), MaxSize)
	line := 0
	for sc.Scan() {
		line++
		text := sc.Text()
		// Comments start with # or ; anywhere on the line (glibc accepts
		// both at the line start; resolvers written since accept both
		// inline).
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
			a, err := netip.ParseAddr(f[1])
			if err != nil {
				return rc, fmt.Errorf("resolv.conf line %d: nameserver %q is not an IP address", line, f[1])
			}
			rc.Nameservers = append(rc.Nameservers, a)
		case "search", "domain":
			rc.Search = rc.Search[:0]
			for _, d := range f[1:] {
				if d, ok := searchDomain(d); ok {
					rc.Search = append(rc.Search, d)
				}
			}
		case "options":
			for _, o := range f[1:] {
				name, v, ok := strings.Cut(o, ":")
				if !ok || (name != "ndots" && name != "timeout") {
					continue
				}
				n, err := strconv.Atoi(v)
				if err != nil || n < 0 {
					return rc, fmt.Errorf("resolv.conf line %d: bad option %q", line, o)
				}
				if name == "ndots" {
					rc.Ndots = min(n, 15)
				} else {
					rc.Timeout = min(max(n, 1), 30) // glibc: 0 means 1
				}
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

// searchDomain returns d lower-cased without its trailing dot, and false
// when d cannot be a domain name (an empty label as in "a..b" or "a..",
// a label over 63 bytes, a name over 253): the libc resolver cannot put
// such a name in a query, so it never searches it, and neither does the
// agent.
func searchDomain(d string) (string, bool) {
	d = strings.TrimSuffix(d, ".")
	if d == "" || len(d) > 253 {
		return "", false
	}
	for label := range strings.SplitSeq(d, ".") {
		if label == "" || len(label) > 63 {
			return "", false
		}
	}
	return strings.ToLower(d), true
}

// Read parses what r holds, reading at most one byte more than MaxSize.
func Read(r io.Reader) (Config, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxSize+1))
	if err != nil {
		return Config{Ndots: 1, Timeout: 5}, fmt.Errorf("read resolv.conf: %w", err)
	}
	return Parse(data)
}

// ReadFile parses the file at path; errors name the path.
func ReadFile(path string) (Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return Config{Ndots: 1, Timeout: 5}, fmt.Errorf("read resolv.conf: %w", err)
	}
	defer f.Close()
	rc, err := Read(f)
	if err != nil {
		return rc, fmt.Errorf("%s: %w", path, err)
	}
	return rc, nil
}

// HostPorts returns the nameservers as host:53 in file order, IPv6 in
// brackets with its scope kept: the upstreams a forwarder dials.
func (c Config) HostPorts() []string {
	out := make([]string, 0, len(c.Nameservers))
	for _, a := range c.Nameservers {
		out = append(out, net.JoinHostPort(a.String(), "53"))
	}
	return out
}

// Addrs returns the nameserver addresses in file order without scopes,
// IPv4-mapped IPv6 as IPv4, and without duplicates: what a packet filter
// matches as destinations (it cannot match a scope).
func (c Config) Addrs() []netip.Addr {
	var out []netip.Addr
	seen := make(map[netip.Addr]bool, len(c.Nameservers))
	for _, a := range c.Nameservers {
		a = a.WithZone("").Unmap()
		if !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	return out
}
