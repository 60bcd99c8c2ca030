package proxy

import (
	"encoding/binary"
	"net"
	"sync"

	"github.com/miekg/dns"
)

// packer is the scratch of packing one first answer: the reply is packed
// into buf and copied from there into the cache's chunk, so a miss leaves
// no reply, message or record copies behind. While every name of a large
// table is asked for the first time, that garbage (about 700 bytes a
// miss) was what took the agent's peak to 1.5x its steady RSS at the
// default GOGC.
type packer struct {
	buf  []byte
	msg  dns.Msg
	q    [1]dns.Question
	ans  []dns.RR
	a    []dns.A
	aaaa []dns.AAAA
}

var packers = sync.Pool{New: func() any { return &packer{buf: make([]byte, 512)} }}

// packAddrs packs the common reply, an answer of A and AAAA records owned
// by the question name with nothing else, straight into p.buf: what
// dns.Msg.Pack makes of it with compression (every owner a pointer to the
// question at offset 12), without its compression map and record copies.
// ok is false for any other reply (packed by dns.Msg then).
func (p *packer) packAddrs(qname string, qtype, qclass uint16, rcode int, rrs []dns.RR) ([]byte, bool) {
	if qname == "." || len(rrs) == 0 || rcode < 0 || rcode > 0xF {
		return nil, false
	}
	b := p.buf[:0]
	b = binary.BigEndian.AppendUint16(b, 0) // ID
	b = binary.BigEndian.AppendUint16(b, 1<<15|1<<10|1<<7|uint16(rcode))
	b = binary.BigEndian.AppendUint16(b, 1)
	b = binary.BigEndian.AppendUint16(b, uint16(len(rrs)))
	b = binary.BigEndian.AppendUint32(b, 0) // NS, AR counts
	need := len(b) + len(qname) + 1 + 4
	if cap(b) < need {
		b = append(make([]byte, 0, 2*need), b...)
	}
	b = b[:need]
	off, err := dns.PackDomainName(qname, b, headerLen, nil, false)
	if err != nil {
		return nil, false
	}
	b = b[:off]
	b = binary.BigEndian.AppendUint16(b, qtype)
	b = binary.BigEndian.AppendUint16(b, qclass)
	for _, rr := range rrs {
		var data []byte
		switch r := rr.(type) {
		case *dns.A:
			if len(r.A) != net.IPv4len && len(r.A) != net.IPv6len {
				return nil, false
			}
			if data = r.A.To4(); data == nil {
				return nil, false
			}
		case *dns.AAAA:
			if len(r.AAAA) != net.IPv6len {
				return nil, false
			}
			data = r.AAAA
		default:
			return nil, false
		}
		h := rr.Header()
		b = binary.BigEndian.AppendUint16(b, 0xC000|headerLen) // owner: the question name
		b = binary.BigEndian.AppendUint16(b, h.Rrtype)
		b = binary.BigEndian.AppendUint16(b, h.Class)
		b = binary.BigEndian.AppendUint32(b, h.Ttl)
		b = binary.BigEndian.AppendUint16(b, uint16(len(data)))
		b = append(b, data...)
	}
	p.buf = b[:0]
	return b, true
}

// owned returns copies of rrs owned by owner, from p's scratch for A and
// AAAA records (shallow: the addresses are shared, and only read while
// packing), else by dns.Copy. The table's records are shared, so their
// owners are never rewritten in place.
func (p *packer) owned(rrs []dns.RR, owner string) []dns.RR {
	p.a, p.aaaa = grow(p.a[:0], len(rrs)), grow(p.aaaa[:0], len(rrs))
	for i, rr := range rrs {
		var c dns.RR
		switch r := rr.(type) {
		case *dns.A:
			p.a[i] = *r
			c = &p.a[i]
		case *dns.AAAA:
			p.aaaa[i] = *r
			c = &p.aaaa[i]
		default:
			c = dns.Copy(rr)
		}
		c.Header().Name = owner
		p.ans = append(p.ans, c)
	}
	return p.ans
}

// grow returns s with length n, reusing its array when large enough.
func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// release clears what p points at (records and names of a table that may
// be replaced) and puts it back in the pool.
func (p *packer) release() {
	clear(p.a)
	clear(p.aaaa)
	clear(p.ans[:cap(p.ans)])
	p.ans = p.ans[:0]
	p.msg = dns.Msg{}
	p.q = [1]dns.Question{}
	packers.Put(p)
}
