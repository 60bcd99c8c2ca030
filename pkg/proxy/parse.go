package proxy

import (
	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/internal/dnswire"
)

// What parse makes of a packet besides a query to decide: a reply made up
// at once (an rcode, >= 0), or none at all.
const (
	parsedOK   = -1 // r holds a query for the decide stage
	parsedDrop = -2 // shorter than a header, or a response: no reply
)

// parse is the parse stage: it reads pkt into r once (internal/dnswire,
// the slow path through miekg for legal but unusual packets) and checks
// what the proxy serves. It returns parsedOK, parsedDrop, or the rcode of
// the reply to make up: FORMERR, NOTIMP for opcodes other than QUERY,
// BADVERS for EDNS versions above 0 (RFC 6891 6.1.3).
func parse(pkt []byte, r *request) int {
	switch dnswire.ParseQuery(pkt, &r.Query) {
	case dnswire.ParseDrop:
		return parsedDrop
	case dnswire.ParseFormErr:
		r.QEnd, r.EDNS = 0, false
		return malformed(r)
	case dnswire.ParseSlow:
		if !canonicalize(r) {
			return malformed(r)
		}
	}
	switch {
	case r.Opcode() != dns.OpcodeQuery:
		return dns.RcodeNotImplemented
	case r.EDNS && r.EDNSVersion > 0:
		return dns.RcodeBadVers
	}
	return parsedOK
}

// malformed is the rcode for a query whose question cannot be used: NOTIMP
// when its opcode is not one we implement, whatever follows the header
// (RFC 8906 3.1.4: a header-only query with an unknown opcode tests for
// NOTIMP, and FORMERR would say the packet is wrong), else FORMERR.
func malformed(r *request) int {
	if r.Opcode() != dns.OpcodeQuery {
		return dns.RcodeNotImplemented
	}
	return dns.RcodeFormatError
}

// canonicalize handles the legal but unusual packets the fast parser
// leaves alone (a compressed question name, records in the answer or
// authority section, extra additional records such as TSIG): miekg unpacks
// r.Pkt, and r is parsed again from a canonical query (header, plain
// question, OPT). false means FORMERR; r then has no question to echo.
func canonicalize(r *request) bool {
	id, flags := r.ID, r.Flags
	m := new(dns.Msg)
	if err := m.Unpack(r.Pkt); err == nil && len(m.Question) == 1 {
		c := &dns.Msg{MsgHdr: m.MsgHdr, Question: m.Question}
		ok := true
		for _, rr := range m.Extra {
			opt, isOPT := rr.(*dns.OPT)
			if !isOPT {
				continue
			}
			// RFC 6891 6.1.1: one OPT at most, owned by the root.
			if len(c.Extra) > 0 || opt.Hdr.Name != "." {
				ok = false
				break
			}
			c.Extra = []dns.RR{opt}
		}
		if buf, err := c.Pack(); ok && err == nil && dnswire.ParseQuery(buf, &r.Query) == dnswire.ParseOK {
			return true
		}
	}
	r.ID, r.Flags, r.QEnd, r.NameEnd, r.EDNS = id, flags, 0, 0, false
	return false
}
