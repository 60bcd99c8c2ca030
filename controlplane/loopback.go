package controlplane

import (
	"fmt"
	"net"
	"strings"
)

// checkLoopback reports an error unless addr ("host:port") listens on
// loopback only.
func checkLoopback(addr string) error {
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
