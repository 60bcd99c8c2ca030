package upstream

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/meshdns/meshdns/internal/dnsname"
)

// Addr is one upstream server as CoreDNS's forward plugin spells it:
//
//	10.0.0.10            plain DNS, port 53
//	10.0.0.10:5353       plain DNS on another port ([fd00::10]:53 for IPv6)
//	dns://10.0.0.10      the same, with the scheme spelt out
//	tls://10.0.0.10      DNS over TLS (RFC 7858), port 853, the certificate
//	                     checked for the IP address
//	tls://10.0.0.10@dns.example
//	                     DNS over TLS, the certificate checked for dns.example
//	tls://[fd00::10]:8853@dns.example
type Addr struct {
	// HostPort is the server's IP and port, as net.Dial takes them.
	HostPort string
	// TLS means DNS over TLS.
	TLS bool
	// ServerName is the name the server's certificate must carry; "" means
	// its IP address.
	ServerName string
}

// errAddr is the usage every bad upstream spelling reports.
var errAddr = errors.New("want IP[:port], dns://IP[:port] or tls://IP[:port][@server.name]")

// ParseAddr reads one upstream. Only IP addresses are taken, as CoreDNS's
// forward does: resolving the resolver's own name would need a resolver.
func ParseAddr(s string) (Addr, error) {
	var a Addr
	rest := s
	switch {
	case strings.HasPrefix(s, "tls://"):
		a.TLS, rest = true, s[len("tls://"):]
		if at := strings.LastIndexByte(rest, '@'); at >= 0 {
			rest, a.ServerName = rest[:at], strings.TrimSuffix(rest[at+1:], ".")
			if err := dnsname.Check(a.ServerName, false); err != nil || a.ServerName == "" {
				return Addr{}, fmt.Errorf("upstream %q: bad server name %q", s, a.ServerName)
			}
		}
	case strings.HasPrefix(s, "dns://"):
		rest = s[len("dns://"):]
	case strings.Contains(s, "://"):
		return Addr{}, fmt.Errorf("upstream %q: unknown scheme: %w", s, errAddr)
	}
	port := "53"
	if a.TLS {
		port = "853"
	}
	ip, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(rest, "["), "]"))
	if err != nil {
		host, p, err := net.SplitHostPort(rest)
		if err != nil {
			return Addr{}, fmt.Errorf("upstream %q: %w", s, errAddr)
		}
		if ip, err = netip.ParseAddr(host); err != nil {
			return Addr{}, fmt.Errorf("upstream %q: %w", s, errAddr)
		}
		if n, err := strconv.ParseUint(p, 10, 16); err != nil || n == 0 {
			return Addr{}, fmt.Errorf("upstream %q: bad port: %w", s, errAddr)
		}
		port = p
	}
	a.HostPort = net.JoinHostPort(ip.Unmap().String(), port)
	return a, nil
}

// String is the canonical spelling: host:port for plain DNS, tls://host:port
// with @name when one is set. It is the metric label of the upstream.
func (a Addr) String() string {
	if !a.TLS {
		return a.HostPort
	}
	if a.ServerName == "" {
		return "tls://" + a.HostPort
	}
	return "tls://" + a.HostPort + "@" + a.ServerName
}
