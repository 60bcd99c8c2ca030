package nametable

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/meshdns/meshdns/internal/dnsname"

	"github.com/miekg/dns"
)

// endpointName is one generated name of a headless service's endpoint.
type endpointName struct {
	label string
	ips   []netip.Addr
}

// addEntry validates e and adds its names: the hostname and AltHosts with
// their records and ports (see addPorts), the names of its endpoints, and
// its addresses to the reverse index.
func (b *builder) addEntry(e *Entry) error {
	host, err := normalizeName(e.Hostname, true)
	if err != nil {
		return err
	}
	ttl := e.TTL
	if ttl == 0 {
		ttl = b.pod.TTL
	}
	ips, err := uniqueAddrs(e.IPs)
	if err != nil {
		return err
	}
	alts := make([]string, 0, len(e.AltHosts))
	for _, a := range e.AltHosts {
		n, err := normalizeName(a, true)
		if err != nil {
			return fmt.Errorf("alt host %q: %w", a, err)
		}
		if n != host {
			alts = append(alts, n)
		}
	}
	if strings.HasPrefix(host, "*.") {
		return b.addWildcard(e, host, alts, ips, ttl)
	}

	fqdn, host := b.slabs.name(host)
	d := &draft{
		canonical: fqdn,
		owner:     host,
		apex:      b.apexFor(host, fallbackApex(e, host)),
		alt:       b.isKubernetes(e, host),
	}
	b.hasAlt = b.hasAlt || d.alt
	if e.CanonicalName != "" {
		if len(ips) > 0 || len(e.Endpoints) > 0 {
			return errors.New("canonical name together with IPs or endpoints")
		}
		c, err := normalizeName(e.CanonicalName, false)
		if err != nil {
			return fmt.Errorf("canonical name %q: %w", e.CanonicalName, err)
		}
		// An ExternalName service answers every type with the CNAME;
		// ports and PTRs do not apply (Kubernetes DNS does the same).
		d.chase, d.ttl = c+".", ttl
		return b.defineAll(d, host, alts)
	}

	for _, a := range ips {
		d.addAddr(b.slabs.addrRR(fqdn, a, ttl))
		b.addPTR(a, d)
	}
	eps, err := endpointNames(e.Endpoints)
	if err != nil {
		return err
	}
	headless := len(ips) == 0
	if headless && len(eps) == 0 {
		// A headless service without ready endpoints has no records:
		// its name is NXDOMAIN, like its SRV names (Kubernetes DNS
		// specification 2.4.1; CoreDNS answers the same).
		return nil
	}
	// targets are the SRV targets; targetRRs their A/AAAA records for the
	// additional section.
	targets := []string{fqdn}
	var targetRRs []dns.RR // nil: the service is its own target
	if len(eps) > 0 {
		targets, targetRRs, err = b.addEndpoints(d, eps, host, alts, ttl, headless)
		if err != nil {
			return err
		}
		if !headless {
			targets, targetRRs = []string{fqdn}, nil
		}
	}
	if err := addPorts(d, e.Ports, targets, targetRRs, ttl); err != nil {
		return err
	}
	return b.defineAll(d, host, alts)
}

// fallbackApex is the zone named in the SOA of negative answers for an
// entry outside every zone and the cluster domain: the cluster domain of a
// Kubernetes service (web.ns.svc.other.local -> other.local), else the
// hostname's parent domain, so that entries of one domain share one SOA.
func fallbackApex(e *Entry, host string) string {
	if e.ShortName != "" && e.Namespace != "" {
		if _, domain, ok := strings.Cut(host, ".svc."); ok {
			return domain
		}
	}
	if p := parent(host); p != "" {
		return p
	}
	return host
}

// isKubernetes reports whether e is a Kubernetes service in the pod's
// cluster domain, whose names also answer as svc.ns, svc.ns.svc and svc.
// Services of other cluster domains answer only as written, as do entries whose hostname is not svc.ns.svc.<domain>.
func (b *builder) isKubernetes(e *Entry, host string) bool {
	if e.ShortName == "" || e.Namespace == "" {
		return false
	}
	want := strings.ToLower(e.ShortName) + "." + strings.ToLower(e.Namespace) + ".svc." + b.pod.ClusterDomain
	return host == want
}

// addWildcard adds an entry named *.domain. A wildcard answers with
// addresses or a CNAME for any name below the domain; ports and endpoints
// would need per-question names, so they are rejected.
func (b *builder) addWildcard(e *Entry, host string, alts []string, ips []netip.Addr, ttl uint32) error {
	if len(e.Ports) > 0 || len(e.Endpoints) > 0 {
		return errors.New("a wildcard cannot have ports or endpoints")
	}
	d := &draft{canonical: host + ".", owner: host, apex: b.apexFor(host[2:], host[2:])}
	if e.CanonicalName != "" {
		if len(ips) > 0 {
			return errors.New("canonical name together with IPs")
		}
		c, err := normalizeName(e.CanonicalName, false)
		if err != nil {
			return fmt.Errorf("canonical name %q: %w", e.CanonicalName, err)
		}
		d.chase, d.ttl = c+".", ttl
	}
	for _, a := range ips {
		d.addAddr(b.slabs.addrRR(host+".", a, ttl))
	}
	return b.defineAll(d, host, alts)
}

// defineAll stores d under its hostname and every alt host.
func (b *builder) defineAll(d *draft, host string, alts []string) error {
	for i := -1; i < len(alts); i++ {
		n := host
		if i >= 0 {
			n = alts[i]
		}
		if w, ok := strings.CutPrefix(n, "*."); ok {
			if old, dup := b.wild[w]; dup {
				return fmt.Errorf("name %q already defined by entry %q", n, old.owner)
			}
			b.wild[w] = d
			continue
		}
		key := n
		if n == host && !strings.HasPrefix(host, "*.") {
			key = d.canonical[:len(host)] // share the canonical name's bytes
		}
		if err := b.define(key, d); err != nil {
			return err
		}
	}
	return nil
}

// defineUnder stores d as label.host and label.alt for every non-wildcard
// alt host; d.canonical must be label.host with trailing dot.
func (b *builder) defineUnder(d *draft, label string, alts []string) error {
	if err := b.define(d.canonical[:len(d.canonical)-1], d); err != nil {
		return err
	}
	for _, a := range alts {
		if strings.HasPrefix(a, "*.") {
			continue
		}
		n := label + "." + a
		if err := checkGenerated(n); err != nil {
			return err
		}
		if err := b.define(n, d); err != nil {
			return err
		}
	}
	return nil
}

// addEndpoints adds a name per endpoint (hostname.svc... or the dashed IP)
// with its A/AAAA records and its addresses to the reverse index, and for
// a headless service the endpoint addresses on the service name. It returns the endpoint names as SRV
// targets and their address records for the additional section.
func (b *builder) addEndpoints(d *draft, eps []endpointName, host string, alts []string, ttl uint32, headless bool) ([]string, []dns.RR, error) {
	targets := make([]string, 0, len(eps))
	var rrs []dns.RR
	for _, ep := range eps {
		fqdn := ep.label + "." + d.canonical
		if err := checkGenerated(fqdn[:len(fqdn)-1]); err != nil {
			return nil, nil, err
		}
		ed := &draft{canonical: fqdn, owner: host, apex: d.apex, alt: d.alt}
		for _, a := range ep.ips {
			rr := b.slabs.addrRR(fqdn, a, ttl)
			ed.addAddr(rr)
			if headless {
				d.addAddr(rr) // the owner is rewritten by the server
			}
			b.addPTR(a, ed)
		}
		targets = append(targets, fqdn)
		rrs = append(rrs, ed.addrs()...)
		if err := b.defineUnder(ed, ep.label, alts); err != nil {
			return nil, nil, err
		}
	}
	return targets, rrs, nil
}

// addPorts validates the ports and keeps them for SRV answers, which
// Lookup builds: every port, named or not, answers SRV on the service
// name; a named port also answers on _name._proto.<service>. The ports are
// grouped by that owner name, so a port name's records are one run.
// targets nil means no SRV records (a headless service without
// endpoints); the service alone means it is its own target.
func addPorts(d *draft, ports []Port, targets []string, targetRRs []dns.RR, ttl uint32) error {
	all := make([]srvPort, 0, len(ports))
	for _, p := range ports {
		if p.Port == 0 {
			return fmt.Errorf("port %q: number 0", p.Name)
		}
		proto := strings.ToLower(p.Protocol)
		switch proto {
		case "":
			proto = "tcp"
		case "tcp", "udp", "sctp":
		default:
			return fmt.Errorf("port %q: unknown protocol %q", p.Name, p.Protocol)
		}
		label := ""
		if p.Name != "" {
			name := strings.ToLower(p.Name)
			if err := dnsname.CheckLabel(name); err != nil {
				return fmt.Errorf("port %q: %w", p.Name, err)
			}
			label = "_" + name + "._" + proto + "."
			if err := checkGenerated(label + d.owner); err != nil {
				return err
			}
		}
		all = append(all, srvPort{label: label, port: p.Port})
	}
	if len(targets) == 0 {
		return nil
	}
	// Group by label in order of first use; services have a handful of
	// ports, so a quadratic pass beats a map.
	d.ports = make([]srvPort, 0, len(all))
	for i, p := range all {
		if slices.ContainsFunc(all[:i], func(q srvPort) bool { return q.label == p.label }) {
			continue
		}
		for _, q := range all[i:] {
			if q.label == p.label {
				d.ports = append(d.ports, q)
			}
		}
	}
	d.ttl = ttl
	if len(targets) != 1 || targets[0] != d.canonical {
		d.targets, d.extra = targets, targetRRs
	}
	return nil
}

// addAddr adds an A or AAAA record to the matching set.
func (d *draft) addAddr(rr dns.RR) {
	if rr.Header().Rrtype == dns.TypeA {
		d.sets[setA] = append(d.sets[setA], rr)
		return
	}
	d.sets[setAAAA] = append(d.sets[setAAAA], rr)
}

// addrs returns the draft's A and AAAA records in a new slice.
func (d *draft) addrs() []dns.RR {
	out := make([]dns.RR, 0, len(d.sets[setA])+len(d.sets[setAAAA]))
	return append(append(out, d.sets[setA]...), d.sets[setAAAA]...)
}

// endpointNames validates endpoints and groups their addresses by name: an
// endpoint with a hostname is one name with all its IPs (dual-stack
// services list the same hostname once per family, so equal hostnames
// merge); one without gets a dashed-IP name per address.
func endpointNames(eps []Endpoint) ([]endpointName, error) {
	var out []endpointName
	index := make(map[string]int, len(eps))
	add := func(label string, a netip.Addr) {
		i, ok := index[label]
		if !ok {
			i = len(out)
			index[label] = i
			out = append(out, endpointName{label: label})
		}
		for _, have := range out[i].ips {
			if have == a {
				return
			}
		}
		out[i].ips = append(out[i].ips, a)
	}
	for _, ep := range eps {
		ips, err := uniqueAddrs(ep.IPs)
		if err != nil {
			return nil, fmt.Errorf("endpoint %q: %w", ep.Hostname, err)
		}
		if ep.Hostname == "" {
			if len(ips) == 0 {
				return nil, errors.New("endpoint without hostname or IPs")
			}
			for _, a := range ips {
				add(dashedLabel(a), a)
			}
			continue
		}
		label := strings.ToLower(ep.Hostname)
		if err := dnsname.CheckLabel(label); err != nil {
			return nil, fmt.Errorf("endpoint hostname %q: %w", ep.Hostname, err)
		}
		if len(ips) == 0 {
			return nil, fmt.Errorf("endpoint %q: no IPs", ep.Hostname)
		}
		for _, a := range ips {
			add(label, a)
		}
	}
	return out, nil
}

// uniqueAddrs validates addresses and drops repeats: an RRset holds each
// record once (RFC 2181 section 5).
func uniqueAddrs(in []netip.Addr) ([]netip.Addr, error) {
	out := make([]netip.Addr, 0, len(in))
	for _, a := range in {
		a, err := checkAddr(a)
		if err != nil {
			return nil, err
		}
		dup := false
		for _, have := range out {
			if have == a {
				dup = true
				break
			}
		}
		if !dup {
			out = append(out, a)
		}
	}
	return out, nil
}
