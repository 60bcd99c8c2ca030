// Package loopback keeps the admin ports on the machine: it checks that a
// listen address is a loopback one, maps "localhost" to the loopback
// address without the hosts file, and tells whether a Host header names
// this machine. The admin listeners of the agent and the control plane
// serve debug endpoints (the name table, the connected agents) that must
// not reach the network.
package loopback

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// CheckAddr reports an error unless addr ("host:port") listens on loopback
// only: a loopback IP (127.0.0.0/8, ::1) or "localhost". An empty host
// (":port") listens on every address and is refused.
func CheckAddr(addr string) error {
	_, err := ListenAddr(addr)
	return err
}

// ListenAddr checks addr as CheckAddr does and returns the address to
// listen on: addr itself, or with "localhost" replaced by 127.0.0.1.
// net.Listen would look "localhost" up through /etc/hosts (and NSS),
// which anything able to write that file can point at a network address;
// RFC 6761 makes "localhost" the loopback address, so it is mapped here
// and never resolved. IPv4's is taken because every Linux has it, where
// ::1 goes with IPv6 being disabled.
func ListenAddr(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("%q: %w", addr, err)
	}
	if isLocalhost(host) {
		return net.JoinHostPort("127.0.0.1", port), nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return addr, nil
	}
	return "", fmt.Errorf("%q is not a loopback address: the debug endpoints stay on 127.0.0.1 (the probe address serves /metrics and /healthz on the network)", addr)
}

// Host reports whether host, the Host header of a request ("name",
// "name:port", "[v6]:port"), names this machine: "localhost" or a
// loopback IP literal. A request whose Host names anything else was
// meant for another server, or is a page of a site whose name now
// resolves to 127.0.0.1 (DNS rebinding), and must not be served.
func Host(host string) bool {
	name := host
	if h, _, err := net.SplitHostPort(host); err == nil {
		name = h
	} else if strings.HasPrefix(name, "[") && strings.HasSuffix(name, "]") {
		name = name[1 : len(name)-1]
	}
	if isLocalhost(name) {
		return true
	}
	ip, err := netip.ParseAddr(name)
	return err == nil && ip.Zone() == "" && ip.Unmap().IsLoopback()
}

// isLocalhost reports whether name is "localhost", in any case, with or
// without the root's dot; its subdomains are not taken, since only some
// resolvers keep them on loopback.
func isLocalhost(name string) bool {
	return strings.EqualFold(strings.TrimSuffix(name, "."), "localhost")
}
