package dnswire

import (
	"encoding/binary"
	"net"
	"strings"
	"sync"
	"unsafe"

	"github.com/miekg/dns"
)

// Packer is the scratch of packing one first answer: the reply is packed
// into buf and copied from there into the cache's chunk, so a miss leaves
// no reply, message or record copies behind. While every name of a large
// table is asked for the first time, that garbage (about 700 bytes a
// miss) was what took the agent's peak to 1.5x its steady RSS at the
// default GOGC.
type Packer struct {
	buf []byte
	// sfx are the names PackWire has written that later names may point
	// at (its compression map).
	sfx []suffix
	// qbuf holds the question name in presentation form for the Lookup.
	qbuf [maxPresentName]byte
	// The dns.Msg fallback's scratch.
	msg  dns.Msg
	q    [1]dns.Question
	ans  []dns.RR
	a    []dns.A
	aaaa []dns.AAAA
}

// Sections is a reply for a Packer: the parts of pkg/nametable's Result
// the wire form needs.
type Sections struct {
	Rcode int
	// Alias, when set, is the target of a CNAME from the question name,
	// which then owns the Answer records; AliasTTL is that CNAME's TTL.
	Alias    string
	AliasTTL uint32
	Answer   []dns.RR
	Chain    []dns.RR
	Ns       []dns.RR
	Extra    []dns.RR
}

// AliasCNAME is the CNAME from the question name to its Alias (owner, the
// alias in the form packed).
func AliasCNAME(res *Sections, qname, owner string) dns.RR {
	return &dns.CNAME{
		Hdr:    dns.RR_Header{Name: qname, Rrtype: dns.TypeCNAME, Class: dns.ClassINET, Ttl: res.AliasTTL},
		Target: owner,
	}
}

// suffix is a name written at off, from one of its labels to the end,
// without the trailing dot.
type suffix struct {
	name string
	off  int
}

var packers = sync.Pool{New: func() any { return &Packer{buf: make([]byte, 512)} }}

// GetPacker returns a Packer from a pool; Release puts it back.
func GetPacker() *Packer { return packers.Get().(*Packer) }

// maxPointer is the first offset a compression pointer cannot reach (14
// bits, RFC 1035 4.1.4).
const maxPointer = 1 << 14

// PackWire packs the reply the Sections describe (pkg/nametable's
// Result contract: question CNAME Alias, Answer owned by Alias or the
// question name, Chain, then Ns and Extra) straight into p.buf, byte for byte what
// dns.Msg.Pack makes of it with compression: the same names are pointers
// to the same earlier names. It takes no compression map, record copies
// or message, which made a CNAME or negative answer that missed the
// answer cache cost several times a cached one. ok is false for what it
// does not pack the way dns.Msg does (record types other than A, AAAA,
// CNAME, PTR, NS, MX, SRV and SOA, names with escapes, an upper-case
// alias, malformed records): dns.Msg packs those (pack).
func (p *Packer) PackWire(res *Sections, qname string, qtype, qclass uint16) ([]byte, bool) {
	owner := qname
	an := len(res.Answer) + len(res.Chain)
	if res.Alias != "" {
		if !lowerPlain(res.Alias) {
			return nil, false
		}
		owner = res.Alias
		an++
	}
	if res.Rcode < 0 || res.Rcode > 0xF || an > 0xFFFF || len(res.Ns) > 0xFFFF || len(res.Extra) > 0xFFFF {
		return nil, false
	}
	p.sfx = p.sfx[:0]
	b := p.buf[:0]
	b = binary.BigEndian.AppendUint16(b, 0) // ID
	b = binary.BigEndian.AppendUint16(b, FlagQR|FlagAA|FlagRA|uint16(res.Rcode))
	b = binary.BigEndian.AppendUint16(b, 1)
	b = binary.BigEndian.AppendUint16(b, uint16(an))
	b = binary.BigEndian.AppendUint16(b, uint16(len(res.Ns)))
	b = binary.BigEndian.AppendUint16(b, uint16(len(res.Extra)))
	b, ok := p.name(b, qname, true, false)
	if !ok {
		return nil, false
	}
	alias := res.Alias != ""
	b = binary.BigEndian.AppendUint16(b, qtype)
	b = binary.BigEndian.AppendUint16(b, qclass)
	if alias {
		b, ok = p.name(b, qname, true, false)
		if !ok {
			return nil, false
		}
		b = appendRRHeader(b, dns.TypeCNAME, dns.ClassINET, res.AliasTTL)
		start := len(b)
		if b, ok = p.name(b, owner, true, true); !ok {
			return nil, false
		}
		binary.BigEndian.PutUint16(b[start-2:], uint16(len(b)-start))
	}
	for _, rr := range res.Answer {
		if b, ok = p.rr(b, rr, owner, alias); !ok {
			return nil, false
		}
	}
	for _, sec := range [...][]dns.RR{res.Chain, res.Ns, res.Extra} {
		for _, rr := range sec {
			if rr == nil {
				return nil, false
			}
			if b, ok = p.rr(b, rr, rr.Header().Name, false); !ok {
				return nil, false
			}
		}
	}
	p.buf = b[:0] // keeps what it grew to
	return b, true
}

// rr appends rr owned by owner (an alias when alias: see name).
func (p *Packer) rr(b []byte, rr dns.RR, owner string, alias bool) ([]byte, bool) {
	if rr == nil {
		return b, false
	}
	b, ok := p.name(b, owner, true, alias)
	if !ok {
		return b, false
	}
	h := rr.Header()
	b = appendRRHeader(b, h.Rrtype, h.Class, h.Ttl)
	start := len(b)
	switch r := rr.(type) {
	case *dns.A:
		// dns.Msg packs the first 4 bytes of a 16-byte address that is no
		// IPv4 one, and nothing for an empty one: leave those to it.
		a4 := r.A.To4()
		if a4 == nil || (len(r.A) != net.IPv4len && len(r.A) != net.IPv6len) {
			return b, false
		}
		b = append(b, a4...)
	case *dns.AAAA:
		if len(r.AAAA) != net.IPv6len {
			return b, false
		}
		b = append(b, r.AAAA...)
	case *dns.CNAME:
		b, ok = p.name(b, r.Target, true, false)
	case *dns.PTR:
		b, ok = p.name(b, r.Ptr, true, false)
	case *dns.NS:
		b, ok = p.name(b, r.Ns, true, false)
	case *dns.MX:
		b = binary.BigEndian.AppendUint16(b, r.Preference)
		b, ok = p.name(b, r.Mx, true, false)
	case *dns.SRV:
		// RFC 2782: the target is never compressed (dns.Msg still
		// remembers it for later names).
		b = binary.BigEndian.AppendUint16(b, r.Priority)
		b = binary.BigEndian.AppendUint16(b, r.Weight)
		b = binary.BigEndian.AppendUint16(b, r.Port)
		b, ok = p.name(b, r.Target, false, false)
	case *dns.SOA:
		if b, ok = p.name(b, r.Ns, true, false); ok {
			b, ok = p.name(b, r.Mbox, true, false)
		}
		for _, v := range [...]uint32{r.Serial, r.Refresh, r.Retry, r.Expire, r.Minttl} {
			b = binary.BigEndian.AppendUint32(b, v)
		}
	default:
		return b, false
	}
	if !ok || len(b)-start > 0xFFFF {
		return b, false
	}
	binary.BigEndian.PutUint16(b[start-2:], uint16(len(b)-start))
	return b, true
}

// appendRRHeader appends a record's type, class, TTL and a zero RDLENGTH
// (set once the data is packed).
func appendRRHeader(b []byte, rrtype, class uint16, ttl uint32) []byte {
	b = binary.BigEndian.AppendUint16(b, rrtype)
	b = binary.BigEndian.AppendUint16(b, class)
	b = binary.BigEndian.AppendUint32(b, ttl)
	return binary.BigEndian.AppendUint16(b, 0)
}

// name appends the presentation-form name s in wire form, compressed as
// dns.Msg compresses: every tail of s from a label on is remembered at its
// offset (below maxPointer) unless an equal tail was written before, and
// with compress the first (longest) such tail becomes a pointer to it.
// Tails compare as bytes, case included, as dns.Msg's map keys do. s ends
// with a dot unless it is an alias (a table's alias may lack it: dns.Msg is
// given it after dns.Fqdn). ok is false for what dns.Msg would refuse or
// spell otherwise: escapes, empty or long labels, a missing trailing dot.
func (p *Packer) name(b []byte, s string, compress, alias bool) ([]byte, bool) {
	if s == "." {
		return append(b, 0), true
	}
	n, dot := strings.CutSuffix(s, ".")
	if n == "" || (!dot && !alias) || strings.IndexByte(n, '\\') >= 0 {
		return b, false
	}
	for rest := n; ; {
		if off, ok := p.find(rest); ok {
			if compress {
				return binary.BigEndian.AppendUint16(b, 0xC000|uint16(off)), true
			}
		} else if len(b) < maxPointer {
			p.sfx = append(p.sfx, suffix{name: rest, off: len(b)})
		}
		label, tail, more := strings.Cut(rest, ".")
		if label == "" || len(label) > maxLabelLen {
			return b, false
		}
		b = append(b, byte(len(label)))
		b = append(b, label...)
		if !more {
			return append(b, 0), true
		}
		rest = tail
	}
}

// find returns the offset of the tail s written before. A reply has a few
// names, so a scan is cheaper than hashing every tail.
func (p *Packer) find(s string) (int, bool) {
	for _, x := range p.sfx {
		if len(x.name) == len(s) && x.name == s {
			return x.off, true
		}
	}
	return 0, false
}

// maxLabelLen is the longest label (RFC 1035 2.3.4).
const maxLabelLen = 63

// lowerPlain reports whether s is ASCII without upper-case letters or
// escapes, so it is the name dns.Msg would pack after strings.ToLower
// (which also rewrites bytes that are not UTF-8).
func lowerPlain(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c >= 'A' && c <= 'Z') || c == '\\' || c >= 0x80 {
			return false
		}
	}
	return true
}

// Pack packs the reply with dns.Msg, from p's scratch, into p's buffer:
// for what PackWire leaves, with the same sections.
func (p *Packer) Pack(res *Sections, qname string, qtype, qclass uint16) ([]byte, error) {
	owner := qname
	p.ans = p.ans[:0]
	if res.Alias != "" {
		owner = strings.ToLower(dns.Fqdn(res.Alias))
		p.ans = append(p.ans, AliasCNAME(res, qname, owner))
	}
	p.ans = append(p.owned(res.Answer, owner), res.Chain...)
	p.q[0] = dns.Question{Name: qname, Qtype: qtype, Qclass: qclass}
	p.msg = dns.Msg{
		MsgHdr:   dns.MsgHdr{Response: true, Authoritative: true, RecursionAvailable: true, Rcode: res.Rcode},
		Compress: true,
		Question: p.q[:],
		Answer:   p.ans,
		Ns:       res.Ns,
		Extra:    res.Extra,
	}
	out, err := p.msg.PackBuffer(p.buf[:cap(p.buf)])
	if err != nil {
		return nil, err
	}
	if cap(out) > cap(p.buf) {
		p.buf = out[:0]
	}
	return out, nil
}

// owned returns copies of rrs owned by owner, from p's scratch for A and
// AAAA records (shallow: the addresses are shared, and only read while
// packing), else by dns.Copy. The table's records are shared, so their
// owners are never rewritten in place.
func (p *Packer) owned(rrs []dns.RR, owner string) []dns.RR {
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

// Release clears what p points at (records and names of a table that may
// be replaced) and puts it back in the pool.
func (p *Packer) Release() {
	clear(p.a)
	clear(p.aaaa)
	clear(p.ans[:cap(p.ans)])
	clear(p.sfx[:cap(p.sfx)])
	p.ans, p.sfx = p.ans[:0], p.sfx[:0]
	p.msg = dns.Msg{}
	p.q = [1]dns.Question{}
	packers.Put(p)
}

// maxPresentName is the longest name QuestionName spells: 255 bytes in
// wire form are at most 255 in presentation form without escapes.
const maxPresentName = MaxNameLen

// QuestionName spells the lowercased wire-form question name in
// presentation form in p's scratch (valid until p is released), as
// dns.UnpackDomainName would, without allocating. ok is false for a name
// with a byte that would need an escape (the caller allocates then).
func (p *Packer) QuestionName(wire []byte) (string, bool) {
	n := 0
	for i := 0; i < len(wire); {
		l := int(wire[i])
		if l == 0 {
			if n == 0 {
				p.qbuf[0] = '.'
				n = 1
			}
			return unsafe.String(&p.qbuf[0], n), true
		}
		if l > maxLabelLen || i+1+l > len(wire) || n+l+1 > len(p.qbuf) {
			return "", false
		}
		for _, c := range wire[i+1 : i+1+l] {
			if !((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_') {
				return "", false
			}
		}
		n += copy(p.qbuf[n:], wire[i+1:i+1+l])
		p.qbuf[n] = '.'
		n++
		i += 1 + l
	}
	return "", false
}
