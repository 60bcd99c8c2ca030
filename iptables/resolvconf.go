package iptables

import (
	"bufio"
	"fmt"
	"io"
	"net/netip"
	"strings"
)

// ParseResolvConf returns the nameserver addresses of a resolv.conf(5)
// file, in file order and without duplicates. Only nameserver lines
// matter here (the agent reads the search list itself); comments start
// with # or ;. An address that does not parse is an error, because
// capturing fewer nameservers than the pod uses would let some queries
// bypass the agent unnoticed.
func ParseResolvConf(r io.Reader) ([]netip.Addr, error) {
	var out []netip.Addr
	seen := map[netip.Addr]bool{}
	sc := bufio.NewScanner(r)
	n := 0
	for sc.Scan() {
		n++
		line := sc.Text()
		if i := strings.IndexAny(line, "#;"); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != "nameserver" {
			continue
		}
		if len(f) < 2 {
			return nil, fmt.Errorf("resolv.conf line %d: nameserver without address", n)
		}
		a, err := netip.ParseAddr(f[1])
		if err != nil {
			return nil, fmt.Errorf("resolv.conf line %d: %w", n, err)
		}
		a = a.WithZone("").Unmap()
		if !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read resolv.conf: %w", err)
	}
	return out, nil
}
