package difftest

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"

	"github.com/miekg/dns"
)

// How a question goes out.
type transport int

const (
	udpPlain transport = iota // UDP without EDNS: 512-byte replies
	udpEDNS                   // UDP with EDNS, 1232-byte buffer
	tcp
	numTransports
)

func (t transport) String() string { return [...]string{"udp", "udp+edns", "tcp"}[t] }

// question is one entry of the corpus. form names the kind of name asked,
// which the difference classes match on.
type question struct {
	name  string // as sent: FQDN, or relative for a search walk
	qtype uint16
	tr    transport
	form  string
	walk  bool      // relative: resolved through the pod's search list
	svc   *service  // the service asked about, or nil
	ep    *endpoint // the endpoint asked about, or nil
}

func (q question) String() string {
	w := ""
	if q.walk {
		w = " (search walk)"
	}
	return fmt.Sprintf("%s %s over %s [%s]%s", q.name, dns.TypeToString[q.qtype], q.tr, q.form, w)
}

// Forms of names in the corpus.
const (
	formService   = "service"
	formSRV       = "srv"
	formEndpoint  = "endpoint"
	formPod       = "pod"
	formPTR       = "ptr"
	formUnknown   = "unknown"
	formRelative  = "relative"
	formNamespace = "namespace"
)

var askedTypes = []uint16{dns.TypeA, dns.TypeAAAA, dns.TypeSRV, dns.TypePTR, dns.TypeCNAME, dns.TypeTXT, dns.TypeMX, dns.TypeANY}

// mixCase flips the case of some letters, as DNS 0x20 resolvers do.
func mixCase(rng *rand.Rand, name string) string {
	b := []byte(name)
	for i, c := range b {
		if c >= 'a' && c <= 'z' && rng.IntN(2) == 0 {
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}

// dashed is the name label of an address in pod and endpoint names:
// dots, or colons of the expanded IPv6 form, become dashes.
func dashed(a netip.Addr) string {
	if a.Is4() {
		return strings.ReplaceAll(a.String(), ".", "-")
	}
	return strings.ReplaceAll(a.String(), ":", "-")
}

// corpus builds the questions for w. Every question goes out over a
// transport drawn from rng, a quarter of them in mixed case.
func corpus(rng *rand.Rand, w *world, podNS string) []question {
	var qs []question
	addEp := func(name string, qtype uint16, form string, s *service, e *endpoint) {
		if rng.IntN(4) == 0 {
			name = mixCase(rng, name)
		}
		qs = append(qs, question{name: name, qtype: qtype, tr: transport(rng.IntN(int(numTransports))), form: form, svc: s, ep: e})
	}
	add := func(name string, qtype uint16, form string, s *service) { addEp(name, qtype, form, s, nil) }
	for _, s := range w.services {
		for _, qt := range askedTypes {
			add(s.fqdn(), qt, formService, s)
		}
		if len(s.endpoints) > 20 { // big enough to truncate: every transport
			for tr := range numTransports {
				qs = append(qs, question{name: s.fqdn(), qtype: dns.TypeA, tr: tr, form: formService, svc: s})
				qs = append(qs, question{name: s.fqdn(), qtype: dns.TypeAAAA, tr: tr, form: formService, svc: s})
				qs = append(qs, question{name: s.fqdn(), qtype: dns.TypeSRV, tr: tr, form: formService, svc: s})
			}
		}
		for _, p := range s.ports {
			add("_"+p.Name+"._"+strings.ToLower(string(p.Protocol))+"."+s.fqdn(), dns.TypeSRV, formSRV, s)
		}
		add("_nosuch._tcp."+s.fqdn(), dns.TypeSRV, formSRV, s)
		add("nosuch."+s.fqdn(), dns.TypeA, formUnknown, s)
		for i := range s.endpoints {
			e := &s.endpoints[i]
			label := e.hostname
			if label == "" {
				label = dashed(e.addr)
			}
			qt := dns.TypeA
			if e.addr.Is6() {
				qt = dns.TypeAAAA
			}
			addEp(label+"."+s.fqdn(), qt, formEndpoint, s, e)
			addEp(dashed(e.addr)+"."+s.ns+".pod.cluster.local.", qt, formPod, s, e)
			ptr, _ := dns.ReverseAddr(e.addr.String())
			addEp(ptr, dns.TypePTR, formPTR, s, e)
		}
		for _, ip := range s.ips {
			ptr, _ := dns.ReverseAddr(ip.String())
			add(ptr, dns.TypePTR, formPTR, s)
		}
		// Relative names, as an application passes them to its resolver.
		rel := []string{s.name + "." + s.ns, s.name + "." + s.ns + ".svc"}
		if s.ns == podNS {
			rel = append(rel, s.name)
		}
		for _, r := range rel {
			qs = append(qs, question{name: r, qtype: dns.TypeA, tr: udpEDNS, form: formRelative, walk: true, svc: s})
		}
	}
	for _, ns := range w.namespaces {
		add("nosuch."+ns+".svc.cluster.local.", dns.TypeA, formUnknown, nil)
		add(ns+".svc.cluster.local.", dns.TypeA, formNamespace, nil)
	}
	add("s0.nosuchns.svc.cluster.local.", dns.TypeA, formUnknown, nil)
	add("svc.cluster.local.", dns.TypeA, formUnknown, nil)
	add("10-9-9-9.nosuchns.pod.cluster.local.", dns.TypeA, formPod, nil)
	add("9.9.9.10.in-addr.arpa.", dns.TypePTR, formPTR, nil)
	add("ext-nosuch.example.org.", dns.TypeA, formUnknown, nil)
	add("nosuch.invalid.", dns.TypeA, formUnknown, nil)
	return qs
}
