package e2e

import (
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/miekg/dns"
)

// runStandIn is a minimal agent used only while developing the capture
// test without the real agent (MESHDNS_E2E_STANDIN=1): it answers the
// table's names, NXDOMAIN for other names in cluster.local, and forwards
// the rest to the nameserver given in $MESHDNS_E2E_UPSTREAM. It proves the
// packet path, not the agent; the real test runs `meshdns agent`.
func runStandIn() int {
	upstream := net.JoinHostPort(os.Getenv("MESHDNS_E2E_UPSTREAM"), "53")
	handler := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		m.Authoritative = true
		if len(r.Question) != 1 {
			m.Rcode = dns.RcodeFormatError
			_ = w.WriteMsg(m)
			return
		}
		q := r.Question[0]
		name := strings.ToLower(q.Name)
		ip := ""
		switch {
		case name == "web.demo.svc.cluster.local.":
			ip = tableWebIP
		case strings.HasSuffix(name, ".wild.example.com."):
			ip = tableWildIP
		case strings.HasSuffix(name, ".cluster.local."):
			m.Rcode = dns.RcodeNameError
		default:
			c := &dns.Client{Net: "udp", Timeout: 2 * time.Second}
			resp, _, err := c.Exchange(r, upstream)
			if err != nil {
				m.Rcode = dns.RcodeServerFailure
				_ = w.WriteMsg(m)
				return
			}
			_ = w.WriteMsg(resp)
			return
		}
		if ip != "" && q.Qtype == dns.TypeA {
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 5},
				A: net.ParseIP(ip)})
		}
		_ = w.WriteMsg(m)
	})
	for _, netw := range []string{"udp", "tcp"} {
		srv := &dns.Server{Addr: "127.0.0.1:15053", Net: netw, Handler: handler}
		go func() {
			if err := srv.ListenAndServe(); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
		}()
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	<-sig
	return 0
}
