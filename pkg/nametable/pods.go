package nametable

import (
	"bytes"
	"net/netip"
	"strings"

	"github.com/miekg/dns"
)

// podRecord answers a name under pod.<cluster domain> (key, lowercase) the way
// Kubernetes DNS does in "pods insecure" mode, from the name alone:
//
//	a-b-c-d.<ns>.pod.<domain>        A a.b.c.d
//	fd00--1.<ns>.pod.<domain>        AAAA fd00::1
//	<ns>.pod.<domain>, pod.<domain>  NODATA (the names exist)
//
// Anything else below pod.<domain> is NXDOMAIN. With
// Context.ForwardPods the question goes upstream instead. The record is
// built per question (it allocates); the proxy packs it once per table.
func (t *Table) podRecord(key []byte, qtype uint16) Result {
	if t.pod.ForwardPods {
		return Result{Action: Forward}
	}
	z := t.zoneOf(key)
	nodata := Result{Action: Answer, Ns: z.soa}
	nxdomain := Result{Action: Answer, Rcode: dns.RcodeNameError, Ns: z.soa}
	if len(key) == len(t.podZone) {
		return nodata
	}
	rest := key[:len(key)-len(t.podZone)-1] // "<ip>.<ns>" or "<ns>"
	i := bytes.IndexByte(rest, '.')
	if i < 0 {
		return nodata
	}
	if bytes.IndexByte(rest[i+1:], '.') >= 0 {
		return nxdomain
	}
	ip, ok := dashedAddr(string(rest[:i]))
	if !ok {
		return nxdomain
	}
	owner := string(key) + "."
	switch {
	case ip.Is4() && (qtype == dns.TypeA || qtype == dns.TypeANY):
		return Result{Action: Answer, Answer: []dns.RR{&dns.A{Hdr: header(owner, dns.TypeA, t.pod.TTL), A: ip.AsSlice()}}}
	case ip.Is6() && (qtype == dns.TypeAAAA || qtype == dns.TypeANY):
		return Result{Action: Answer, Answer: []dns.RR{&dns.AAAA{Hdr: header(owner, dns.TypeAAAA, t.pod.TTL), AAAA: ip.AsSlice()}}}
	}
	return nodata
}

// dashedAddr parses a pod address label: 10-244-0-5, or fd00--5 for
// fd00::5. Zoned and IPv4-mapped forms are not pod addresses.
func dashedAddr(label string) (netip.Addr, bool) {
	if strings.Count(label, "-") == 3 {
		if a, err := netip.ParseAddr(strings.ReplaceAll(label, "-", ".")); err == nil && a.Is4() {
			return a, true
		}
	}
	a, err := netip.ParseAddr(strings.ReplaceAll(label, "-", ":"))
	if err != nil || !a.Is6() || a.Is4In6() || a.Zone() != "" {
		return netip.Addr{}, false
	}
	return a, true
}
