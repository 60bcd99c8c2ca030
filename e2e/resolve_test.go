package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"sort"
	"strings"
	"time"
)

// runResolve is the Go client helper: it resolves each name of
// $MESHDNS_E2E_NAMES (comma-separated) with the pure-Go resolver, exactly
// as an unmodified Go program in the pod would (GODEBUG=netdns=go), over
// UDP, or over TCP only when $MESHDNS_E2E_NET is "tcp". It prints one line
// per name: "<name> <ips sorted, comma-separated>" or "<name> error".
func runResolve() int {
	r := &net.Resolver{PreferGo: true}
	if os.Getenv("MESHDNS_E2E_NET") == "tcp" {
		r.Dial = func(ctx context.Context, _, address string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", address)
		}
	}
	for _, name := range strings.Split(os.Getenv("MESHDNS_E2E_NAMES"), ",") {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		ips, err := r.LookupHost(ctx, name)
		cancel()
		if err != nil {
			fmt.Printf("%s error\n", name)
			continue
		}
		sort.Strings(ips)
		fmt.Printf("%s %s\n", name, strings.Join(ips, ","))
	}
	return 0
}
