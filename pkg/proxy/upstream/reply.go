package upstream

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/internal/dnswire"
	"github.com/meshdns/meshdns/pkg/proxy/upstream/cache"
)

// makeEntry turns an upstream reply to question q (lowercased wire form,
// name nameLen bytes) into an Entry and says whether it may be cached.
//
// The entry has QR, RD and RA (AA, AD and CD are dropped: the agent is a
// forwarder, not an authority or a validator), no OPT record (the proxy
// owns client-side EDNS), and one TTL for every record, the one the cache
// counts down, the way CoreDNS's cache does. Positive replies live for the
// smallest record TTL within [MinTTL, MaxTTL]; NXDOMAIN and NODATA for
// min(SOA TTL, SOA minimum) from the authority section, capped by
// MaxNegativeTTL (RFC 2308 section 5); without an SOA they are not cached
// (section 5 says SHOULD NOT). Other rcodes are passed on, never cached.
//
// A reply read from the wire (scanReply) keeps its records as they came,
// compression included; one miekg unpacked is repacked by it.
func (r *Resolver) makeEntry(m upReply, q []byte, nameLen int, now int64) (*cache.Entry, bool, error) {
	if m.msg != nil {
		return r.repackEntry(m.msg, q, nameLen, now)
	}
	s := m.scan
	packed := m.b[:s.end]
	if s.spelt {
		bp := bufPool.Get().(*[]byte)
		defer bufPool.Put(bp)
		var ok bool
		if packed, ok = pointQuestion((*bp)[:0], m.b, q, nameLen, s.end); !ok {
			rm := new(dns.Msg)
			if err := rm.Unpack(m.b); err != nil {
				return nil, false, fmt.Errorf("unpack reply: %w", err)
			}
			return r.repackEntry(rm, q, nameLen, now)
		}
	}
	// The bytes are the try's own: the header becomes the entry's (the
	// body's compression pointers never point into it, nameEnd).
	binary.BigEndian.PutUint16(packed[2:], dnswire.FlagQR|dnswire.FlagRD|dnswire.FlagRA|uint16(m.rcode&dnswire.RcodeMask))
	binary.BigEndian.PutUint16(packed[6:], s.counts[0])
	binary.BigEndian.PutUint16(packed[8:], s.counts[1])
	binary.BigEndian.PutUint16(packed[10:], s.counts[2])
	ttl, cacheable, negative := r.entryTTL(m.rcode, s.counts[0] > 0, s.minTTL, s.soaTTL, s.hasSOA)
	e, err := cache.NewEntry(packed, len(q), ttl, now, negative)
	if err != nil {
		return nil, false, fmt.Errorf("walk reply: %w", err)
	}
	return e, cacheable && len(packed) <= r.cfg.MaxEntrySize, nil
}

// entryTTL is makeEntry's TTL policy for a reply with rcode, answers or
// not, the smallest TTL of its records (MaxUint32: none) and the SOA of
// its authority section, if any.
func (r *Resolver) entryTTL(rcode int, answers bool, minTTL, soaTTL uint32, hasSOA bool) (ttl uint32, cacheable, negative bool) {
	if minTTL == math.MaxUint32 {
		minTTL = 0
	}
	switch {
	case rcode == dns.RcodeSuccess && answers:
		ttl = clampTTL(minTTL, r.cfg.MinTTL, r.cfg.MaxTTL)
		return ttl, ttl > 0, false
	case rcode == dns.RcodeNameError || rcode == dns.RcodeSuccess:
		if !hasSOA {
			return minTTL, false, true
		}
		ttl = clampTTL(soaTTL, 0, r.cfg.MaxNegativeTTL)
		return ttl, ttl > 0, true
	}
	return minTTL, false, false
}

// repackEntry is makeEntry for a reply miekg unpacked: it is repacked
// with compression, without its OPT record.
func (r *Resolver) repackEntry(m *dns.Msg, q []byte, nameLen int, now int64) (*cache.Entry, bool, error) {
	if len(m.Question) != 1 {
		return nil, false, fmt.Errorf("reply has %d questions", len(m.Question))
	}
	out := &dns.Msg{
		MsgHdr:   dns.MsgHdr{Response: true, RecursionDesired: true, RecursionAvailable: true, Rcode: m.Rcode & 0xF},
		Compress: true,
		Question: m.Question[:1],
		Answer:   m.Answer,
		Ns:       m.Ns,
	}
	minTTL := uint32(math.MaxUint32)
	for _, sec := range [][]dns.RR{m.Answer, m.Ns, m.Extra} {
		for _, rr := range sec {
			if rr.Header().Rrtype == dns.TypeOPT {
				continue
			}
			minTTL = min(minTTL, rr.Header().Ttl)
		}
	}
	for _, rr := range m.Extra {
		if rr.Header().Rrtype != dns.TypeOPT {
			out.Extra = append(out.Extra, rr)
		}
	}
	var (
		soaTTL uint32
		hasSOA bool
	)
	for _, rr := range m.Ns {
		if soa, ok := rr.(*dns.SOA); ok {
			soaTTL, hasSOA = min(soa.Hdr.Ttl, soa.Minttl), true
			break
		}
	}
	ttl, cacheable, negative := r.entryTTL(m.Rcode, len(m.Answer) > 0, minTTL, soaTTL, hasSOA)

	packed, err := out.Pack()
	if err != nil {
		return nil, false, fmt.Errorf("repack reply: %w", err)
	}
	// The entry's compression pointers assume the question is exactly as
	// long as the client's; a name that repacks differently is refused.
	if len(packed) < 12+len(q) || !dnswire.EqualFold(packed[12:12+nameLen], q[:nameLen]) {
		return nil, false, fmt.Errorf("repack reply: question changed")
	}
	// miekg unpacks some records it cannot pack back into something
	// parseable (an SOA with empty rdata, found by FuzzUpstreamReply); never
	// serve or cache such a reply.
	if err := new(dns.Msg).Unpack(packed); err != nil {
		return nil, false, fmt.Errorf("repacked reply does not unpack: %w", err)
	}
	e, err := cache.NewEntry(packed, len(q), ttl, now, negative)
	if err != nil {
		return nil, false, fmt.Errorf("walk reply: %w", err)
	}
	return e, cacheable && len(packed) <= r.cfg.MaxEntrySize, nil
}

// clampTTL bounds ttl seconds to [lo, hi].
func clampTTL(ttl uint32, lo, hi time.Duration) uint32 {
	l, h := uint32(lo/time.Second), uint32(min(hi/time.Second, math.MaxUint32))
	return min(max(ttl, l), h)
}
