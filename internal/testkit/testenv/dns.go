package testenv

import (
	"net"
	"testing"

	"github.com/miekg/dns"
)

// ServeDNS serves h on UDP and TCP at one 127.0.0.1 port until the test
// ends and returns the address.
func ServeDNS(t testing.TB, h dns.Handler) string {
	t.Helper()
	pc, l := ListenPair(t)
	Serve(t, &dns.Server{PacketConn: pc, Handler: h})
	Serve(t, &dns.Server{Listener: l, Handler: h})
	return pc.LocalAddr().String()
}

// Serve runs srv (its PacketConn or Listener set) until the test ends.
// It returns once srv runs: a Shutdown before the server started fails
// and leaves its goroutine serving, which goleak would report.
func Serve(t testing.TB, srv *dns.Server) {
	t.Helper()
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.ActivateAndServe()
	}()
	<-started
	t.Cleanup(func() {
		_ = srv.Shutdown()
		<-done
	})
}

// AnswerA is a handler that answers every question with one A record of
// ip, TTL ttl, and counts the questions in n when n is not nil.
func AnswerA(ip string, ttl uint32, n interface{ Add(int64) int64 }) dns.HandlerFunc {
	return func(w dns.ResponseWriter, r *dns.Msg) {
		if n != nil {
			n.Add(1)
		}
		m := new(dns.Msg).SetReply(r)
		if len(r.Question) == 1 {
			m.Answer = append(m.Answer, &dns.A{
				Hdr: dns.RR_Header{Name: r.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: ttl},
				A:   net.ParseIP(ip),
			})
		}
		w.WriteMsg(m)
	}
}
