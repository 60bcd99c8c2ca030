// Command testapp is the application container of the real-node tests: it
// resolves names the way a Go program in a pod does (the pure Go resolver,
// which reads /etc/resolv.conf: nameservers, search list, ndots), and prints
// one line per name per round, so the test reads what the pod saw from the
// container log.
//
//	testapp -every 200ms web web.demo _http._tcp.web.demo.svc.cluster.local.
//
// Names starting with "_" are looked up as SRV, the rest as addresses. Each
// line is "RESULT <unix nanos> <name> ok <answers, sorted>" or
// "RESULT <unix nanos> <name> err <error>".
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"sort"
	"strings"
	"time"
)

func main() {
	every := flag.Duration("every", 0, "repeat the lookups at this interval (0: once)")
	flag.Parse()
	if b, err := os.ReadFile("/etc/resolv.conf"); err == nil {
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			fmt.Println("RESOLV " + line)
		}
	}
	r := &net.Resolver{PreferGo: true}
	for {
		for _, name := range flag.Args() {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			answers, err := lookup(ctx, r, name)
			cancel()
			now := time.Now().UnixNano()
			if err != nil {
				fmt.Printf("RESULT %d %s err %v\n", now, name, strings.ReplaceAll(err.Error(), " ", "_"))
				continue
			}
			sort.Strings(answers)
			fmt.Printf("RESULT %d %s ok %s\n", now, name, strings.Join(answers, ","))
		}
		if *every == 0 {
			return
		}
		time.Sleep(*every)
	}
}

func lookup(ctx context.Context, r *net.Resolver, name string) ([]string, error) {
	if strings.HasPrefix(name, "_") {
		_, srvs, err := r.LookupSRV(ctx, "", "", name)
		var out []string
		for _, s := range srvs {
			out = append(out, fmt.Sprintf("%s:%d", strings.ToLower(s.Target), s.Port))
		}
		return out, err
	}
	return r.LookupHost(ctx, name)
}
