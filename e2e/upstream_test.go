package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/miekg/dns"
)

// Addresses of the test topology, from the benchmarking range 198.18.0.0/15
// (RFC 2544) so nothing can be confused with a real network. They live in
// namespaces the test creates, so parallel runs do not collide.
const (
	upstreamIP = "198.18.0.1" // cluster DNS namespace
	podIP      = "198.18.0.2" // pod namespace
)

// upstreamRecords is what the "cluster DNS" server answers. Its answer for
// the service differs from the agent's table, so a reply tells which of
// the two answered.
var upstreamRecords = map[string]string{
	"external.example.org.":       "198.51.100.7",
	"web.demo.svc.cluster.local.": "10.255.0.1",
	// A corporate host under the node's search domain, named like the
	// pod's service "web": the agent must forward it, never answer it.
	"web.corp.example.com.": corpWebIP,
	// The public name of the table's Service google in namespace com:
	// asked fully qualified, the agent must forward it, not answer it.
	"google.com.": publicGoogleIP,
	// Outside names of the DNS policy test (policy_test.go).
	"api.stripe.com.":        stripeIP,
	"b.s3.amazonaws.com.":    bucketIP,
	"s3-w.amazonaws.com.":    s3WebIP,
	"wiki.corp.example.com.": wikiIP,
}

// upstreamCNAMEs are aliases the upstream answers with the CNAME and the
// target's A record (from upstreamRecords).
var upstreamCNAMEs = map[string]string{
	"stays.s3.amazonaws.com.":  "b.s3.amazonaws.com.",
	"leaves.s3.amazonaws.com.": "s3-w.amazonaws.com.",
}

// wildDomain is an allowed wildcard of the DNS policy test: the upstream
// answers every name below it with wildIP, as the domain's own nameserver
// answers the labels of a tunnel.
const wildDomain = ".wild.example."

const (
	wildIP         = "203.0.113.30"
	corpWebIP      = "203.0.113.80"
	publicGoogleIP = "203.0.113.66"
	stripeIP       = "203.0.113.10"
	bucketIP       = "203.0.113.11"
	s3WebIP        = "203.0.113.12"
	wikiIP         = "203.0.113.20"
)

// runUpstream is the "cluster DNS" helper: it answers A queries from
// upstreamRecords (and below wildDomain) over UDP and TCP on upstreamIP:53 (NXDOMAIN for other
// names, NODATA for other types of known names) and prints one line per
// query to stdout, "query <proto> <source ip> <name> <type>", so the test
// can count what reached it. It prints "ready" once both sockets listen.
func runUpstream() int {
	var mu sync.Mutex // serializes stdout lines
	handler := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		if len(r.Question) == 1 {
			q := r.Question[0]
			src, _, _ := net.SplitHostPort(w.RemoteAddr().String())
			mu.Lock()
			fmt.Printf("query %s %s %s %s\n", w.RemoteAddr().Network(), src, strings.ToLower(q.Name), dns.TypeToString[q.Qtype])
			mu.Unlock()
			name, owner := strings.ToLower(q.Name), q.Name
			if target, ok := upstreamCNAMEs[name]; ok {
				m.Answer = append(m.Answer, &dns.CNAME{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeCNAME, Class: dns.ClassINET, Ttl: 5},
					Target: target})
				name, owner = target, target
			}
			ip, ok := upstreamRecords[name]
			if !ok && strings.HasSuffix(name, wildDomain) {
				ip, ok = wildIP, true
			}
			switch {
			case !ok:
				m.Rcode = dns.RcodeNameError
			case q.Qtype == dns.TypeA:
				m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: owner, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 5},
					A: net.ParseIP(ip)})
			}
		}
		_ = w.WriteMsg(m)
	})
	addr := net.JoinHostPort(upstreamIP, "53")
	udp, err := net.ListenPacket("udp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	tcp, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	go func() { _ = (&dns.Server{PacketConn: udp, Handler: handler}).ActivateAndServe() }()
	go func() { _ = (&dns.Server{Listener: tcp, Handler: handler}).ActivateAndServe() }()
	fmt.Println("ready")
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	<-sig
	return 0
}

// queryLog collects the query lines of a running upstream helper.
type queryLog struct {
	mu    sync.Mutex // guards lines
	lines []string
	ready chan struct{}
}

func newQueryLog(t testing.TB, r io.Reader) *queryLog {
	l := &queryLog{ready: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(r)
		readyOnce := sync.OnceFunc(func() { close(l.ready) })
		for sc.Scan() {
			line := sc.Text()
			if line == "ready" {
				readyOnce()
				continue
			}
			l.mu.Lock()
			l.lines = append(l.lines, line)
			l.mu.Unlock()
		}
	}()
	return l
}

// since returns the lines logged after the first n, and the new total.
func (l *queryLog) since(n int) ([]string, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines[n:]...), len(l.lines)
}

func (l *queryLog) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.lines)
}
