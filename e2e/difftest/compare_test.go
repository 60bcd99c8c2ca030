package difftest

import (
	"fmt"
	"slices"
	"strings"

	"github.com/miekg/dns"
)

// diff lists how md (meshdns) differs from cd (CoreDNS): rcode, answer set
// (order-insensitive), TTLs of records both have, TC and AA. Empty means
// the same reply.
func diff(cd, md reply) []string {
	var out []string
	if cd.rcode != md.rcode {
		out = append(out, "rcode")
	}
	if cd.tc != md.tc {
		out = append(out, "tc")
	}
	if cd.aa != md.aa {
		out = append(out, "aa")
	}
	same, ttl := len(cd.answer) == len(md.answer), false
	for k, t := range cd.answer {
		mt, ok := md.answer[k]
		if !ok {
			same = false
		} else if mt != t {
			ttl = true
		}
	}
	// A truncated reply holds whichever records fit, which depends on the
	// order each server shuffled them in: when both truncate, the client
	// retries over TCP, so only TC and the rcode compare.
	if !same && !(cd.tc && md.tc) {
		out = append(out, "answer")
	}
	if ttl {
		out = append(out, "ttl")
	}
	return out
}

// difference is one question the two servers answered differently.
type difference struct {
	q      question
	cd, md reply
	what   []string // from diff
}

func (d difference) String() string {
	return fmt.Sprintf("%v differs in %s\n\tcoredns: %v\n\tmeshdns: %v", d.q, strings.Join(d.what, ","), d.cd, d.md)
}

// class is one documented kind of difference (docs/coredns-differences.md,
// same name). match reports whether d is of this class.
type class struct {
	name  string
	match func(d difference) bool
}

// has reports whether what lists exactly the given parts.
func only(what []string, parts ...string) bool {
	if len(what) != len(parts) {
		return false
	}
	for i := range what {
		if what[i] != parts[i] {
			return false
		}
	}
	return true
}

// classes are the differences docs/coredns-differences.md documents. A
// difference none of them matches fails the test.
var classes = []class{
	{name: "externalname-every-type", match: func(d difference) bool {
		if d.q.svc == nil || d.q.svc.kind < externalInCluster || d.q.form != formService {
			return false
		}
		cname := "cname " + strings.ToLower(d.q.svc.target) + "."
		return d.cd.rcode == dns.RcodeSuccess && len(d.cd.answer) == 0 && d.md.rcode == dns.RcodeSuccess &&
			hasKey(d.md.answer, strings.ToLower(d.q.name)+" "+cname)
	}},
	{name: "externalname-outside-aa", match: func(d difference) bool {
		return d.q.svc != nil && d.q.svc.kind >= externalInCluster && only(d.what, "aa") && d.cd.aa && !d.md.aa &&
			leavesCluster(d.md.answer)
	}},
	{name: "externalname-to-nameless-target", match: func(d difference) bool {
		if d.q.svc == nil || d.q.svc.kind != externalInCluster || d.cd.rcode != dns.RcodeSuccess || d.md.rcode != dns.RcodeNameError {
			return false
		}
		if d.q.walk {
			return len(d.cd.answer) == 0 && len(d.md.answer) == 0
		}
		// The chain may be longer (an ExternalName naming another):
		// meshdns has every CNAME of it, CoreDNS the first or nothing.
		cname := strings.ToLower(d.q.name) + " cname " + strings.ToLower(d.q.svc.target) + "."
		for k := range d.cd.answer {
			if k != cname {
				return false
			}
		}
		for k := range d.md.answer {
			if f := strings.Fields(k); len(f) != 3 || f[1] != "cname" {
				return false
			}
		}
		return hasKey(d.md.answer, cname)
	}},
	{name: "srv-weight-dual-stack", match: func(d difference) bool {
		return d.q.qtype == dns.TypeSRV && d.q.svc != nil && d.q.svc.kind == clusterIPDual && only(d.what, "answer") &&
			equalKeys(withoutWeights(d.cd.answer), withoutWeights(d.md.answer))
	}},
	{name: "clusterip-endpoint-names", match: func(d difference) bool {
		return d.q.ep != nil && d.q.svc.kind <= clusterIPDual && (d.q.form == formEndpoint || d.q.form == formPTR) &&
			d.cd.rcode == dns.RcodeSuccess && len(d.cd.answer) > 0 && d.md.rcode == dns.RcodeNameError
	}},
	{name: "any-service-addresses", match: func(d difference) bool {
		if d.q.qtype != dns.TypeANY || d.q.form != formService || d.q.svc == nil || d.q.svc.kind >= externalInCluster ||
			d.cd.rcode != dns.RcodeSuccess || len(d.cd.answer) != 0 || d.md.rcode != dns.RcodeSuccess {
			return false
		}
		if !only(d.what, "answer") && !(only(d.what, "tc", "answer") || only(d.what, "tc")) {
			return false
		}
		if slices.Contains(d.what, "tc") && (d.cd.tc || !d.md.tc) {
			return false // only meshdns's bigger reply may be truncated
		}
		owner := strings.ToLower(d.q.name)
		for k := range d.md.answer {
			if f := strings.Fields(k); len(f) != 3 || f[0] != owner || (f[1] != "a" && f[1] != "aaaa") {
				return false
			}
		}
		return true
	}},
	{name: "pod-name-unknown-namespace", match: func(d difference) bool {
		return d.q.form == formPod && d.q.svc == nil && d.cd.rcode == dns.RcodeNameError && d.md.rcode == dns.RcodeSuccess
	}},
}

// leavesCluster reports whether an answer's CNAME chain reaches a name
// outside the cluster (the test upstream's zone).
func leavesCluster(answer map[string]uint32) bool {
	for k := range answer {
		if strings.Contains(k, outsideZone) {
			return true
		}
	}
	return false
}

func hasKey(m map[string]uint32, k string) bool {
	_, ok := m[k]
	return ok
}

func equalKeys(a, b map[string]uint32) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !hasKey(b, k) {
			return false
		}
	}
	return true
}

// withoutWeights drops the weight field of SRV records ("owner srv
// priority weight port target").
func withoutWeights(m map[string]uint32) map[string]uint32 {
	out := map[string]uint32{}
	for k, v := range m {
		f := strings.Fields(k)
		if len(f) == 6 && f[1] == "srv" {
			f[3] = "-"
		}
		out[strings.Join(f, " ")] = v
	}
	return out
}

// classify returns the name of d's class, or "".
func classify(d difference) string {
	for _, c := range classes {
		if c.match(d) {
			return c.name
		}
	}
	return ""
}
