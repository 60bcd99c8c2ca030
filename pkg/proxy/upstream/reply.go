package upstream

import (
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
// The reply is repacked with QR, RD and RA (AA, AD and CD are dropped: the
// agent is a forwarder, not an authority or a validator), without its OPT
// record (the proxy owns client-side EDNS), and with one TTL for every
// record, the one the cache counts down, the way CoreDNS's cache does.
// Positive replies live for the smallest record TTL within [MinTTL, MaxTTL];
// NXDOMAIN and NODATA for min(SOA TTL, SOA minimum) from the authority
// section, capped by MaxNegativeTTL (RFC 2308 section 5); without an SOA
// they are not cached (section 5 says SHOULD NOT). Other rcodes are passed
// on, never cached.
func (r *Resolver) makeEntry(m *dns.Msg, q []byte, nameLen int, now int64) (*cache.Entry, bool, error) {
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
	if minTTL == math.MaxUint32 {
		minTTL = 0
	}

	var (
		ttl       uint32
		cacheable bool
		negative  bool
	)
	switch {
	case m.Rcode == dns.RcodeSuccess && len(m.Answer) > 0:
		ttl = clampTTL(minTTL, r.cfg.MinTTL, r.cfg.MaxTTL)
		cacheable = ttl > 0
	case m.Rcode == dns.RcodeNameError || m.Rcode == dns.RcodeSuccess:
		negative = true
		ttl = minTTL
		for _, rr := range m.Ns {
			if soa, ok := rr.(*dns.SOA); ok {
				ttl = clampTTL(min(soa.Hdr.Ttl, soa.Minttl), 0, r.cfg.MaxNegativeTTL)
				cacheable = ttl > 0
				break
			}
		}
	default:
		ttl = minTTL
	}

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
	if len(packed) > r.cfg.MaxEntrySize {
		cacheable = false
	}
	return e, cacheable, nil
}

// clampTTL bounds ttl seconds to [lo, hi].
func clampTTL(ttl uint32, lo, hi time.Duration) uint32 {
	l, h := uint32(lo/time.Second), uint32(min(hi/time.Second, math.MaxUint32))
	return min(max(ttl, l), h)
}
