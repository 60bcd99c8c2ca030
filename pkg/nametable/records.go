package nametable

import (
	"net"
	"net/netip"
	"strconv"

	"github.com/miekg/dns"
)

// dnsSchemaVersion is the Kubernetes DNS specification version we follow
// (kubernetes/dns docs/specification.md section 2.2).
const dnsSchemaVersion = "1.1.0"

// SOA timers, as CoreDNS's kubernetes plugin sets them; nothing transfers
// our zones, so only MINIMUM (the negative-caching TTL, RFC 2308 section
// 5) matters and it follows the table TTL.
const (
	soaRefresh = 7200
	soaRetry   = 1800
	soaExpire  = 86400
)

// SRV priority and weight: the Kubernetes DNS specification leaves them
// open. As CoreDNS does, every record of an answer has priority 0 and the
// weight 100/n of the n records (spreadWeights), so clients that weigh SRV
// records (RFC 2782) spread their load evenly and behave as they do under
// CoreDNS.
const srvPriority = 0

// versionTTL is the TTL of dns-version TXT: the schema version changes
// only with the software, so resolvers may keep it a long time.
const versionTTL = 3600

func header(owner string, rrtype uint16, ttl uint32) dns.RR_Header {
	return dns.RR_Header{Name: owner, Rrtype: rrtype, Class: dns.ClassINET, Ttl: ttl}
}

// slabs hands out address records from chunks, so that the records a
// table keeps (the bulk of its objects) are not scattered one by one
// among the build's garbage, which would leave the heap fragmented once
// that is freed; it also saves the size-class rounding of each record.
// Chunks live as long as the table.
type slabs struct {
	a    []dns.A
	aaaa []dns.AAAA
	ip   []byte
	size int // of the next chunk, doubling up to maxSlab
}

const maxSlab = 1024

func (s *slabs) grow() int {
	s.size = min(max(2*s.size, 16), maxSlab)
	return s.size
}

// ipBytes copies b into the IP chunk.
func (s *slabs) ipBytes(b []byte) net.IP {
	if cap(s.ip)-len(s.ip) < len(b) {
		s.ip = make([]byte, 0, 16*max(s.size, 16))
	}
	lo := len(s.ip)
	s.ip = append(s.ip, b...)
	return net.IP(s.ip[lo:len(s.ip):len(s.ip)])
}

// addrRR is the A or AAAA record of a.
func (s *slabs) addrRR(owner string, a netip.Addr, ttl uint32) dns.RR {
	if a.Is4() {
		if len(s.a) == cap(s.a) {
			s.a = make([]dns.A, 0, s.grow())
		}
		b := a.As4()
		s.a = append(s.a, dns.A{Hdr: header(owner, dns.TypeA, ttl), A: s.ipBytes(b[:])})
		return &s.a[len(s.a)-1]
	}
	if len(s.aaaa) == cap(s.aaaa) {
		s.aaaa = make([]dns.AAAA, 0, s.grow())
	}
	b := a.As16()
	s.aaaa = append(s.aaaa, dns.AAAA{Hdr: header(owner, dns.TypeAAAA, ttl), AAAA: s.ipBytes(b[:])})
	return &s.aaaa[len(s.aaaa)-1]
}

func srvRR(owner, target string, port uint16, ttl uint32) dns.RR {
	return &dns.SRV{Hdr: header(owner, dns.TypeSRV, ttl), Priority: srvPriority, Weight: 100, Port: port, Target: target}
}

func ptrRR(owner, target string, ttl uint32) dns.RR {
	return &dns.PTR{Hdr: header(owner, dns.TypePTR, ttl), Ptr: target}
}

func txtRR(owner, text string, ttl uint32) dns.RR {
	return &dns.TXT{Hdr: header(owner, dns.TypeTXT, ttl), Txt: []string{text}}
}

// soaRR is the SOA of zone (lowercase, no trailing dot) in the form the
// Kubernetes DNS specification shows: ns.dns.<zone>. hostmaster.<zone>.
// A zone name too long to take the prefixes (the parent of a long entry
// name outside every zone can be 250 characters) gets them on its closest
// ancestor that leaves room: a name over 253 characters cannot be packed,
// and every negative answer carrying the SOA would fail.
func soaRR(zone string, serial, ttl uint32) dns.RR {
	host := zone
	for len("hostmaster.")+len(host) > maxName {
		host = parent(host)
	}
	return &dns.SOA{
		Hdr:     header(zone+".", dns.TypeSOA, ttl),
		Ns:      "ns.dns." + host + ".",
		Mbox:    "hostmaster." + host + ".",
		Serial:  serial,
		Refresh: soaRefresh,
		Retry:   soaRetry,
		Expire:  soaExpire,
		Minttl:  ttl,
	}
}

// reverseName is the PTR owner of a, lowercase with trailing dot:
// 4.3.2.10.in-addr.arpa. or the 32 nibbles under ip6.arpa. (RFC 3596).
func reverseName(a netip.Addr) string {
	return string(appendReverseName(make([]byte, 0, 64+len("ip6.arpa.")), a))
}

// appendReverseName appends the reverse name of a to buf.
func appendReverseName(buf []byte, a netip.Addr) []byte {
	if a.Is4() {
		b := a.As4()
		for i := 3; i >= 0; i-- {
			buf = strconv.AppendUint(buf, uint64(b[i]), 10)
			buf = append(buf, '.')
		}
		return append(buf, "in-addr.arpa."...)
	}
	const hex = "0123456789abcdef"
	b := a.As16()
	for i := 15; i >= 0; i-- {
		buf = append(buf, hex[b[i]&0xf], '.', hex[b[i]>>4], '.')
	}
	return append(buf, "ip6.arpa."...)
}

// spreadWeights gives each of the SRV records in rrs the weight 100/n
// (at least 1).
func spreadWeights(rrs []dns.RR) {
	w := uint16(max(1, 100/len(rrs)))
	for _, rr := range rrs {
		rr.(*dns.SRV).Weight = w
	}
}
