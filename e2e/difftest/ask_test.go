package difftest

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/meshdns/meshdns/e2e/internal/kubestack"
	"github.com/miekg/dns"
)

// reply is a DNS reply in comparable form.
type reply struct {
	rcode  int
	tc, aa bool
	// answer maps "owner TYPE rdata", lowercased, to the record's TTL.
	answer map[string]uint32
}

func (r reply) String() string {
	keys := slices.Sorted(maps.Keys(r.answer))
	var b strings.Builder
	fmt.Fprintf(&b, "%s", dns.RcodeToString[r.rcode])
	if r.tc {
		b.WriteString(" tc")
	}
	if r.aa {
		b.WriteString(" aa")
	}
	for _, k := range keys {
		fmt.Fprintf(&b, "; %s ttl=%d", k, r.answer[k])
	}
	return b.String()
}

// rrKey is the comparable form of one record: owner, type and data,
// without TTL and class, lowercased (names compare case-insensitively).
func rrKey(rr dns.RR, withOwner bool) string {
	h := rr.Header()
	data := strings.TrimPrefix(rr.String(), h.String())
	k := dns.TypeToString[h.Rrtype] + " " + data
	if withOwner {
		k = h.Name + " " + k
	}
	return strings.ToLower(k)
}

// toReply makes m comparable. A search walk (addressesOnly) keeps only
// the asked type's data, as getaddrinfo returns addresses only: the
// CNAMEs a server adds on the way are not what the application sees.
func toReply(m *dns.Msg, addressesOnly bool) reply {
	r := reply{rcode: m.Rcode, tc: m.Truncated, aa: m.Authoritative, answer: map[string]uint32{}}
	for _, rr := range m.Answer {
		if addressesOnly && rr.Header().Rrtype != m.Question[0].Qtype {
			continue
		}
		r.answer[rrKey(rr, !addressesOnly)] = rr.Header().Ttl
	}
	return r
}

// exchange sends one question to addr over tr, retrying lost UDP packets;
// a loaded machine may drop or delay them, so the timeout is generous.
func exchange(addr, name string, qtype uint16, tr transport) (*dns.Msg, error) {
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	c := &dns.Client{Net: "udp", Timeout: 5 * time.Second}
	switch tr {
	case udpEDNS:
		m.SetEdns0(1232, false)
	case tcp:
		c.Net = "tcp"
	}
	var err error
	for range 4 {
		var r *dns.Msg
		if r, _, err = c.Exchange(m, addr); err == nil {
			if len(r.Question) != 1 || r.Question[0].Name != name {
				return nil, fmt.Errorf("reply's question %v does not echo %q", r.Question, name)
			}
			return r, nil
		}
	}
	return nil, err
}

// resolve asks addr the question q: directly, or for a relative name as
// a stub resolver with the pod's search list and ndots:5 does, each
// candidate in turn until one has answers (glibc goes on past NXDOMAIN and
// NODATA, and reports NODATA when no candidate answered but one existed). A walk's answers are compared by the addresses only: which
// candidate answered, and through which CNAME, is the server's business.
func resolve(addr string, q question, podNS string) (reply, error) {
	if !q.walk {
		m, err := exchange(addr, q.name, q.qtype, q.tr)
		if err != nil {
			return reply{}, err
		}
		return toReply(m, false), nil
	}
	var last reply
	nodata := false
	for _, suffix := range append(kubestack.SearchList(podNS), "") {
		name := q.name + "." + suffix
		if suffix == "" {
			name = q.name + "."
		}
		m, err := exchange(addr, dns.Fqdn(name), q.qtype, q.tr)
		if err != nil {
			return reply{}, err
		}
		last = toReply(m, true)
		last.aa = false // which candidate answered decides AA
		if m.Rcode == dns.RcodeSuccess {
			if len(last.answer) > 0 {
				return last, nil
			}
			nodata = true
		}
	}
	if nodata { // glibc reports NODATA if any candidate had the name
		last.rcode = dns.RcodeSuccess
	}
	return last, nil
}
