// Command testapp is the application container of the real-node tests: it
// resolves names the way a Go program in a pod does (the pure Go resolver,
// which reads /etc/resolv.conf: nameservers, search list, ndots), and prints
// one line per name per round, so the test reads what the pod saw from the
// container log.
//
//	testapp -every 200ms web web.demo _http._tcp.web.demo.svc.cluster.local.
//
// Names starting with "_" are looked up as SRV, names starting with "="
// are asked as one A question (the rest of the name, fully qualified) of
// resolv.conf's first nameserver, and their addresses printed in the
// reply's order (the Go resolver sorts addresses, RFC 6724), the rest as
// addresses. Each line is "RESULT <unix nanos> <name> ok <answers, sorted>"
// (in order for "=") or "RESULT <unix nanos> <name> err <error>".
// With -every, a line "START <unix nanos>" before the first round tells
// when the first lookup began, so a test can time it.
// With -check it looks each name up once and exits 1 if one failed, as
// nslookup does (install-check.sh runs it with kubectl exec).
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

	"golang.org/x/net/dns/dnsmessage"
)

func main() {
	every := flag.Duration("every", 0, "repeat the lookups at this interval (0: once)")
	check := flag.Bool("check", false, "look each name up once, exit 1 if one failed")
	flag.Parse()
	failed := false
	if b, err := os.ReadFile("/etc/resolv.conf"); err == nil {
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			fmt.Println("RESOLV " + line)
		}
	}
	r := &net.Resolver{PreferGo: true}
	if *every > 0 {
		fmt.Printf("START %d\n", time.Now().UnixNano())
	}
	for {
		for _, name := range flag.Args() {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			answers, err := lookup(ctx, r, name)
			cancel()
			now := time.Now().UnixNano()
			if err != nil {
				fmt.Printf("RESULT %d %s err %v\n", now, name, strings.ReplaceAll(err.Error(), " ", "_"))
				failed = true
				continue
			}
			if !strings.HasPrefix(name, "=") {
				sort.Strings(answers)
			}
			fmt.Printf("RESULT %d %s ok %s\n", now, name, strings.Join(answers, ","))
		}
		if *check && failed {
			os.Exit(1)
		}
		if *every == 0 || *check {
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
	if q, ok := strings.CutPrefix(name, "="); ok {
		return askA(ctx, q)
	}
	return r.LookupHost(ctx, name)
}

// askA sends one A question for name to resolv.conf's first nameserver
// over UDP and returns the answer's addresses in order.
func askA(ctx context.Context, name string) ([]string, error) {
	server, err := firstNameserver()
	if err != nil {
		return nil, err
	}
	qname, err := dnsmessage.NewName(name)
	if err != nil {
		return nil, err
	}
	id := uint16(time.Now().UnixNano())
	msg := dnsmessage.Message{Header: dnsmessage.Header{ID: id, RecursionDesired: true},
		Questions: []dnsmessage.Question{{Name: qname, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}}}
	b, err := msg.Pack()
	if err != nil {
		return nil, err
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "udp", net.JoinHostPort(server, "53"))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	if _, err := c.Write(b); err != nil {
		return nil, err
	}
	buf := make([]byte, 4096)
	for {
		n, err := c.Read(buf)
		if err != nil {
			return nil, err
		}
		var reply dnsmessage.Message
		if err := reply.Unpack(buf[:n]); err != nil || reply.ID != id {
			continue
		}
		if reply.RCode != dnsmessage.RCodeSuccess {
			return nil, fmt.Errorf("rcode %v", reply.RCode)
		}
		var out []string
		for _, rr := range reply.Answers {
			if a, ok := rr.Body.(*dnsmessage.AResource); ok {
				out = append(out, net.IP(a.A[:]).String())
			}
		}
		return out, nil
	}
}

// firstNameserver is the first nameserver of /etc/resolv.conf.
func firstNameserver() (string, error) {
	b, err := os.ReadFile("/etc/resolv.conf")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "nameserver" {
			return f[1], nil
		}
	}
	return "", fmt.Errorf("no nameserver in /etc/resolv.conf")
}
