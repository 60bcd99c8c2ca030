// Package loopback checks that a listen address stays on the machine: the
// admin listeners of the agent and the control plane serve debug endpoints
// (the name table, the connected agents) that must not reach the network.
package loopback

import (
	"fmt"
	"net"
	"strings"
)

// CheckAddr reports an error unless addr ("host:port") listens on loopback
// only: a loopback IP (127.0.0.0/8, ::1) or "localhost". An empty host
// (":port") listens on every address and is refused.
func CheckAddr(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q: %w", addr, err)
	}
	if strings.EqualFold(host, "localhost") {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("%q is not a loopback address: the debug endpoints stay on 127.0.0.1 (the probe address serves /metrics and /healthz on the network)", addr)
}
