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
	local bool // in the pod's zone (zone.go)
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
	ips, err := appendUniqueAddrs(b.ipBuf[:0], e.IPs)
	if err != nil {
		return err
	}
	b.ipBuf = ips
	names := []string{host}
	for _, a := range e.AltHosts {
		n, err := normalizeName(a, true)
		if err != nil {
			return fmt.Errorf("alt host %q: %w", a, err)
		}
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	if strings.HasPrefix(host, "*.") {
		return b.addWildcard(e, names, ips, ttl)
	}

	id, n, err := b.t.st.NewNode()
	if err != nil {
		return err
	}
	ref, fqdn := b.t.st.PutText("", host)
	names[0] = b.t.st.Key(ref) // share the canonical name's bytes
	apex := b.zoneOf(host)     // apexFor's first choice, without the fallback's search
	if apex == "" {
		apex = b.apexFor(host, fallbackApex(e, host))
	}
	s := &spec{id: id, n: n, ref: ref, canonical: fqdn, owner: names[0]}
	if b.isKubernetes(e, host) {
		s.flags = flagAlt | b.publicForms(e)
		b.hasAlt = true
	}
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
		s.cname = &dns.CNAME{Hdr: header(fqdn, dns.TypeCNAME, ttl), Target: c + "."}
		s.shape = b.shapeFor(apex, 0, nil, nil, nil)
		return b.place(s, names)
	}

	s.a, s.aaaa = b.addrSets(ips, fqdn, ttl)
	eps, err := endpointNames(b.epNames, e.Endpoints, b.pod.Zone)
	if err != nil {
		return err
	}
	b.epNames = eps[:0]
	headless := len(ips) == 0
	if headless && len(eps) == 0 {
		// A headless service without ready endpoints has no records:
		// its name is NXDOMAIN, like its SRV names (Kubernetes DNS
		// specification 2.4.1; CoreDNS answers the same). Its node
		// stays unused.
		return nil
	}
	ports, err := b.srvPorts(e.Ports, host)
	if err != nil {
		return err
	}
	// targets are the SRV targets of a headless service, extra their
	// A/AAAA records for the additional section; nil: the service is
	// its own target.
	var targets []string
	var extra []dns.RR
	if len(eps) > 0 {
		targets, extra, err = b.addEndpoints(s, eps, names, apex, ttl, headless)
		if err != nil {
			return err
		}
		if headless {
			s.a, s.aaaa = b.hlA, b.hlAAAA
			if b.local != [2]uint16{} {
				s.flags |= flagZoned
			}
		} else {
			targets, extra = nil, nil
		}
	}
	s.shape = b.shapeFor(apex, ttl, ports, targets, extra)
	if s.flags&flagZoned != 0 {
		b.t.shapes[s.shape].local = b.local
	}
	if err := b.place(s, names); err != nil {
		return err
	}
	if !headless {
		b.addPTRs(s.n)
	}
	return nil
}

// addrSets returns the A and AAAA records of ips, owned by fqdn, in the
// builder's scratch buffers.
func (b *builder) addrSets(ips []netip.Addr, fqdn string, ttl uint32) (a, aaaa []dns.RR) {
	b.bufA, b.bufAAAA = b.bufA[:0], b.bufAAAA[:0]
	for _, ip := range ips {
		if ip.Is4() {
			b.bufA = append(b.bufA, b.slabs.addrRR(fqdn, ip, ttl))
		} else {
			b.bufAAAA = append(b.bufAAAA, b.slabs.addrRR(fqdn, ip, ttl))
		}
	}
	return b.bufA, b.bufAAAA
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
	// host == lower(ShortName) + "." + lower(Namespace) + ".svc." +
	// cluster domain, compared in place rather than built per entry.
	short, ns, suffix := len(e.ShortName), len(e.Namespace), len(".svc.")+len(b.pod.ClusterDomain)
	if len(host) != short+1+ns+suffix {
		return false
	}
	rest := host[short+1+ns:]
	return strings.EqualFold(host[:short], e.ShortName) && host[short] == '.' &&
		strings.EqualFold(host[short+1:short+1+ns], e.Namespace) &&
		rest[:len(".svc.")] == ".svc." && rest[len(".svc."):] == b.pod.ClusterDomain
}

// addWildcard adds an entry named *.domain. A wildcard answers with
// addresses or a CNAME for any name below the domain; ports and endpoints
// would need per-question names, so they are rejected.
func (b *builder) addWildcard(e *Entry, names []string, ips []netip.Addr, ttl uint32) error {
	if len(e.Ports) > 0 || len(e.Endpoints) > 0 {
		return errors.New("a wildcard cannot have ports or endpoints")
	}
	host := names[0]
	id, n, err := b.t.st.NewNode()
	if err != nil {
		return err
	}
	ref, fqdn := b.t.st.PutText("", host)
	s := &spec{id: id, n: n, ref: ref, canonical: fqdn, owner: host, shape: b.shapeFor(b.apexFor(host[2:], host[2:]), 0, nil, nil, nil)}
	if e.CanonicalName != "" {
		if len(ips) > 0 {
			return errors.New("canonical name together with IPs")
		}
		c, err := normalizeName(e.CanonicalName, false)
		if err != nil {
			return fmt.Errorf("canonical name %q: %w", e.CanonicalName, err)
		}
		s.cname = &dns.CNAME{Hdr: header(fqdn, dns.TypeCNAME, ttl), Target: c + "."}
	}
	s.a, s.aaaa = b.addrSets(ips, fqdn, ttl)
	return b.place(s, names)
}

// addEndpoints adds a name per endpoint (hostname.svc... or the dashed IP,
// under the hostname and every alt host that is not a wildcard) with its
// A/AAAA records and its addresses to the reverse index, and for a
// headless service collects the endpoint addresses for the service name
// (in b.hlA, b.hlAAAA). It returns the endpoint names as SRV targets
// and their address records for the additional section.
func (b *builder) addEndpoints(svc *spec, eps []endpointName, names []string, apex string, ttl uint32, headless bool) ([]string, []dns.RR, error) {
	targets := make([]string, 0, len(eps))
	n := 0
	for _, ep := range eps {
		n += len(ep.ips)
	}
	extra := make([]dns.RR, 0, n)
	b.hlA, b.hlAAAA = b.hlA[:0], b.hlAAAA[:0]
	b.local = [2]uint16{}
	shape := b.shapeFor(apex, 0, nil, nil, nil)
	for _, ep := range eps {
		id, n, err := b.t.st.NewNode()
		if err != nil {
			return nil, nil, err
		}
		ref, fqdn := b.t.st.PutText(ep.label+".", names[0])
		if err := checkGenerated(fqdn[:len(fqdn)-1]); err != nil {
			return nil, nil, err
		}
		s := &spec{id: id, n: n, ref: ref, canonical: fqdn, owner: names[0], shape: shape, flags: svc.flags, under: true}
		b.epA, b.epAAAA = b.epA[:0], b.epAAAA[:0]
		for _, a := range ep.ips {
			rr := b.slabs.addrRR(fqdn, a, ttl)
			if a.Is4() {
				b.epA = append(b.epA, rr)
			} else {
				b.epAAAA = append(b.epAAAA, rr)
			}
		}
		if headless {
			// The owner is rewritten by the server.
			b.hlA = append(b.hlA, b.epA...)
			b.hlAAAA = append(b.hlAAAA, b.epAAAA...)
			if ep.local {
				b.local[0] += uint16(len(b.epA))
				b.local[1] += uint16(len(b.epAAAA))
			}
		}
		s.a, s.aaaa = b.epA, b.epAAAA
		targets = append(targets, fqdn)
		extra = append(append(extra, b.epA...), b.epAAAA...)
		epNames := []string{b.t.st.Key(ref)}
		for _, a := range names[1:] {
			if strings.HasPrefix(a, "*.") {
				continue
			}
			name := ep.label + "." + a
			if err := checkGenerated(name); err != nil {
				return nil, nil, err
			}
			epNames = append(epNames, name)
		}
		if err := b.place(s, epNames); err != nil {
			return nil, nil, err
		}
		b.addPTRs(n)
	}
	return targets, extra, nil
}

// srvPorts validates the ports of the service host and returns them for
// SRV answers, which Lookup builds: every port, named or not, answers SRV
// on the service name; a named port also answers on
// _name._proto.<service>. The ports are grouped by that owner name, so a
// port name's records are one run.
//
// The result is b's scratch, valid until the next call: shapeFor copies
// the ports of a shape it makes, and most services share one.
func (b *builder) srvPorts(ports []Port, host string) ([]srvPort, error) {
	all := b.portBuf[:0]
	defer func() { b.portBuf = all[:0] }()
	for _, p := range ports {
		if p.Port == 0 {
			return nil, fmt.Errorf("port %q: number 0", p.Name)
		}
		proto := 0 // in protos: no lowered copy of Kubernetes' "TCP" per port
		switch {
		case p.Protocol == "" || isLetters(p.Protocol, "tcp"):
		case isLetters(p.Protocol, "udp"):
			proto = 1
		case isLetters(p.Protocol, "sctp"):
			proto = 2
		default:
			return nil, fmt.Errorf("port %q: unknown protocol %q", p.Name, p.Protocol)
		}
		label := ""
		if p.Name != "" {
			var err error
			if label, err = b.portLabel(p.Name, proto); err != nil {
				return nil, err
			}
			if len(label)+len(host) > maxName { // the name only said in the error
				return nil, checkGenerated(label + host)
			}
		}
		all = append(all, srvPort{label: label, port: p.Port})
	}
	if len(all) == 0 {
		return nil, nil
	}
	// Group by label in order of first use; services have a handful of
	// ports, so a quadratic pass beats a map. Most have no label twice:
	// then all is the answer as it is.
	twice := false
	for i, p := range all {
		twice = twice || slices.ContainsFunc(all[:i], func(q srvPort) bool { return q.label == p.label })
	}
	if !twice {
		return all, nil
	}
	out := make([]srvPort, 0, len(all))
	for i, p := range all {
		if slices.ContainsFunc(all[:i], func(q srvPort) bool { return q.label == p.label }) {
			continue
		}
		for _, q := range all[i:] {
			if q.label == p.label {
				out = append(out, q)
			}
		}
	}
	return out, nil
}

// isLetters reports whether s is lower, the ASCII letters a-z, in any
// case (strings.EqualFold would also take Unicode's long s for "s").
func isLetters(s, lower string) bool {
	if len(s) != len(lower) {
		return false
	}
	for i := range len(s) {
		if s[i]|0x20 != lower[i] {
			return false
		}
	}
	return true
}

// protos are the protocols of ports, lowercase.
var protos = [...]string{"tcp", "udp", "sctp"}

// portLabel returns the checked label _name._proto. of a port, the same
// string for every service with the port (a cluster has few port names).
// They are found by name, then protocol: a key of both, hashed per port,
// cost twice as much.
func (b *builder) portLabel(name string, proto int) (string, error) {
	ls := b.portLabels[name]
	if ls != nil && ls[proto] != "" {
		return ls[proto], nil
	}
	lower := strings.ToLower(name)
	if err := dnsname.CheckLabel(lower); err != nil {
		return "", fmt.Errorf("port %q: %w", name, err)
	}
	l := "_" + lower + "._" + protos[proto] + "."
	if b.portLabels == nil {
		b.portLabels = make(map[string]*[len(protos)]string)
	}
	if ls == nil && len(b.portLabels) < maxPortLabels {
		ls = new([len(protos)]string)
		b.portLabels[name] = ls
	}
	if ls != nil {
		ls[proto] = l
	}
	return l, nil
}

// maxPortLabels bounds builder.portLabels, should every service name
// its ports differently.
const maxPortLabels = 1024

// endpointNames validates endpoints and groups their addresses by name: an
// endpoint with a hostname is one name with all its IPs (dual-stack
// services list the same hostname once per family, so equal hostnames
// merge); one without gets a dashed-IP name per address.
//
// Names in the pod's zone (inPodZone) come first, each group in the order
// the endpoints came.
//
// out is scratch (length 0) whose entries, and their addresses' arrays,
// are reused: the names and addresses of every endpoint were a quarter
// of the garbage of a build.
func endpointNames(out []endpointName, eps []Endpoint, zone string) ([]endpointName, error) {
	out = out[:0]
	// A few names are found by a scan: a map per entry was a tenth of
	// the garbage of building a table of headless services.
	const scanMax = 16
	var index map[string]int
	find := func(label string) (int, bool) {
		if index != nil {
			i, ok := index[label]
			return i, ok
		}
		for i := range out {
			if out[i].label == label {
				return i, true
			}
		}
		return 0, false
	}
	add := func(label string, a netip.Addr, local bool) {
		i, ok := find(label)
		if !ok {
			i = len(out)
			if i < cap(out) {
				out = out[:i+1]
				out[i] = endpointName{label: label, ips: out[i].ips[:0]}
			} else {
				out = append(out, endpointName{label: label})
			}
			if index != nil {
				index[label] = i
			} else if len(out) > scanMax {
				index = make(map[string]int, len(eps))
				for j := range out {
					index[out[j].label] = j
				}
			}
		}
		out[i].local = out[i].local || local
		for _, have := range out[i].ips {
			if have == a {
				return
			}
		}
		out[i].ips = append(out[i].ips, a)
	}
	var ips []netip.Addr // one endpoint's, reused by the next
	for _, ep := range eps {
		local := inPodZone(&ep, zone)
		var err error
		ips, err = appendUniqueAddrs(ips[:0], ep.IPs)
		if err != nil {
			return nil, fmt.Errorf("endpoint %q: %w", ep.Hostname, err)
		}
		if ep.Hostname == "" {
			if len(ips) == 0 {
				return nil, errors.New("endpoint without hostname or IPs")
			}
			for _, a := range ips {
				add(dashedLabel(a), a, local)
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
			add(label, a, local)
		}
	}
	return localFirst(out), nil
}

// uniqueAddrs validates addresses and drops repeats: an RRset holds each
// record once (RFC 2181 section 5).
func uniqueAddrs(in []netip.Addr) ([]netip.Addr, error) {
	return appendUniqueAddrs(make([]netip.Addr, 0, len(in)), in)
}

// appendUniqueAddrs is uniqueAddrs appending to out.
func appendUniqueAddrs(out, in []netip.Addr) ([]netip.Addr, error) {
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
