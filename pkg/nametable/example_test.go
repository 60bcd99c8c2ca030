package nametable_test

import (
	"fmt"
	"net/netip"

	"github.com/meshdns/meshdns/pkg/nametable"
	"github.com/miekg/dns"
)

func Example() {
	t, err := nametable.New([]nametable.Entry{{
		Hostname:  "web.demo.svc.cluster.local",
		IPs:       []netip.Addr{netip.MustParseAddr("10.96.0.10")},
		ShortName: "web",
		Namespace: "demo",
		Ports:     []nametable.Port{{Name: "http", Port: 80, Protocol: "TCP"}},
	}}, []string{"cluster.local"}, nametable.Context{
		Namespace: "demo",
		Search:    []string{"demo.svc.cluster.local", "svc.cluster.local", "cluster.local"},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, q := range []dns.Question{
		{Name: "web.", Qtype: dns.TypeA, Qclass: dns.ClassINET},
		{Name: "web.demo.demo.svc.cluster.local.", Qtype: dns.TypeA, Qclass: dns.ClassINET},
		{Name: "_http._tcp.web.demo.svc.cluster.local.", Qtype: dns.TypeSRV, Qclass: dns.ClassINET},
		{Name: "10.0.96.10.in-addr.arpa.", Qtype: dns.TypePTR, Qclass: dns.ClassINET},
		{Name: "web.demo.svc.cluster.local.", Qtype: dns.TypeAAAA, Qclass: dns.ClassINET},
		{Name: "google.com.demo.svc.cluster.local.", Qtype: dns.TypeA, Qclass: dns.ClassINET},
		{Name: "google.com.", Qtype: dns.TypeA, Qclass: dns.ClassINET},
	} {
		r := t.Lookup(q)
		if r.Action == nametable.Forward {
			fmt.Printf("%s %s: forward\n", q.Name, dns.TypeToString[q.Qtype])
			continue
		}
		fmt.Printf("%s %s: %s alias=%q answers=%d ns=%d extra=%d\n",
			q.Name, dns.TypeToString[q.Qtype], dns.RcodeToString[r.Rcode], r.Alias, len(r.Answer), len(r.Ns), len(r.Extra))
	}
	// Output:
	// web. A: NOERROR alias="" answers=1 ns=0 extra=0
	// web.demo.demo.svc.cluster.local. A: NOERROR alias="web.demo.svc.cluster.local." answers=1 ns=0 extra=0
	// _http._tcp.web.demo.svc.cluster.local. SRV: NOERROR alias="" answers=1 ns=0 extra=1
	// 10.0.96.10.in-addr.arpa. PTR: NOERROR alias="" answers=1 ns=0 extra=0
	// web.demo.svc.cluster.local. AAAA: NOERROR alias="" answers=0 ns=1 extra=0
	// google.com.demo.svc.cluster.local. A: NXDOMAIN alias="" answers=0 ns=1 extra=0
	// google.com. A: forward
}
