package agent

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/meshdns/meshdns/internal/resolvconf"
)

// resolvInputs are what the agent takes from the resolv.conf files.
type resolvInputs struct {
	Upstreams []string
	Search    []string
	Ndots     int
	// ClientTimeout is how long the pod's resolver waits for a reply
	// (resolv.conf "options timeout:").
	ClientTimeout time.Duration
	// From names the file or flag the upstreams came from, for the logs.
	From string
}

// readResolvInputs decides the upstreams and search list:
//   - --upstream wins over any file;
//   - else, when the agent serves port 53 (a VM where /etc/resolv.conf
//     points at the agent) and VMResolvConf exists, its nameservers: the
//     setup script saved the machine's real resolvers there;
//   - else the nameservers of ResolvConf.
//
// The search list and ndots always come from ResolvConf. Nameservers that
// are the agent's own DNS addresses are dropped: forwarding to ourselves
// would loop until every query times out.
func readResolvInputs(cfg Config) (resolvInputs, error) {
	rc, err := resolvconf.ReadFile(cfg.ResolvConf)
	if err != nil {
		return resolvInputs{}, err
	}
	in := resolvInputs{Search: rc.Search, Ndots: rc.Ndots, Upstreams: rc.HostPorts(), From: cfg.ResolvConf,
		ClientTimeout: time.Duration(rc.Timeout) * time.Second}
	switch {
	case len(cfg.Upstreams) > 0:
		in.Upstreams, in.From = cfg.Upstreams, "--upstream"
	case servesPort53(cfg.DNSAddrs):
		vrc, err := resolvconf.ReadFile(cfg.VMResolvConf)
		if errors.Is(err, fs.ErrNotExist) {
			break
		}
		if err != nil {
			return in, fmt.Errorf("VM upstreams: %w", err)
		}
		in.Upstreams, in.From = vrc.HostPorts(), cfg.VMResolvConf
	}
	in.Upstreams = withoutSelf(in.Upstreams, cfg.DNSAddrs)
	if len(in.Upstreams) == 0 {
		return in, fmt.Errorf("no upstream nameserver (from %s, after dropping the agent's own addresses); set --upstream", in.From)
	}
	return in, nil
}

func servesPort53(addrs []string) bool {
	for _, a := range addrs {
		if _, p, err := net.SplitHostPort(a); err == nil && p == "53" {
			return true
		}
	}
	return false
}

// withoutSelf drops upstreams that are one of the listen addresses, where
// an unspecified listen host (0.0.0.0, ::) covers every loopback address.
func withoutSelf(ups, listen []string) []string {
	var out []string
	for _, u := range ups {
		if !isSelf(u, listen) {
			out = append(out, u)
		}
	}
	return out
}

func isSelf(up string, listen []string) bool {
	uh, upPort, err := net.SplitHostPort(up)
	if err != nil {
		return false
	}
	ua, err := netip.ParseAddr(uh)
	if err != nil {
		return false
	}
	for _, l := range listen {
		lh, lp, err := net.SplitHostPort(l)
		if err != nil || lp != upPort {
			continue
		}
		if lh == "" {
			lh = "0.0.0.0"
		}
		la, err := netip.ParseAddr(lh)
		if err != nil {
			continue
		}
		if la.Unmap() == ua.Unmap() || (la.IsUnspecified() && (ua.IsLoopback() || ua.IsUnspecified())) {
			return true
		}
	}
	return false
}

// defaultV6Addr is the IPv6 twin of the default DNS address.
const defaultV6Addr = "[::1]:15053"

// withV6Listener adds [::1]:15053 to the default listen address when an
// upstream is IPv6 and v6 loopback works.
func withV6Listener(addrs, upstreams []string, v6 bool) []string {
	if !v6 {
		return addrs
	}
	for _, u := range upstreams {
		h, _, err := net.SplitHostPort(u)
		if err != nil {
			continue
		}
		if a, err := netip.ParseAddr(h); err == nil && a.Is6() && !a.Is4In6() {
			return append(append([]string(nil), addrs...), defaultV6Addr)
		}
	}
	return addrs
}

// ipv6Loopback reports whether [::1] can be bound (IPv6 may be disabled in
// the pod).
func ipv6Loopback() bool {
	c, err := net.ListenPacket("udp6", "[::1]:0")
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// upstreamTLS is the TLS configuration of DNS-over-TLS upstreams: the CAs
// of caFile, or the system's roots when caFile is "".
func upstreamTLS(caFile string) (*tls.Config, error) {
	if caFile == "" {
		return nil, nil
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("upstream CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("upstream CA %s: no PEM certificate in it", caFile)
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}
