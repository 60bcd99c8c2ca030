package ingest

import (
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"strings"

	"github.com/meshdns/meshdns/internal/dnsname"
	"github.com/meshdns/meshdns/internal/namewire"
	"github.com/meshdns/meshdns/pkg/nametable"
)

// Limits bound what one table may hold, so a runaway control plane or a
// wrong file cannot make the agent build a table that eats the pod's memory.
// A zero field takes the default named beside it.
type Limits struct {
	// MaxNames is the number of hostnames (map keys); 250,000.
	MaxNames int
	// MaxIPs is the number of addresses of one name or endpoint; 1,024.
	MaxIPs int
	// MaxEndpoints is the number of endpoints of one headless service; 10,000.
	MaxEndpoints int
	// MaxPorts is the number of named ports of one name; 1,024.
	MaxPorts int
	// MaxAltHosts is the number of alternate names of one name; 64.
	MaxAltHosts int
}

func (l Limits) withDefaults() Limits {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&l.MaxNames, 250_000)
	def(&l.MaxIPs, 1024)
	def(&l.MaxEndpoints, 10_000)
	def(&l.MaxPorts, 1024)
	def(&l.MaxAltHosts, 64)
	return l
}

// ErrInvalidTable wraps every reason a table is rejected as invalid; the
// discovery client NACKs it with codes.InvalidArgument.
var ErrInvalidTable = errors.New("invalid name table")

// convertTable converts a decoded NameTable whole, as a build does name by
// name (the unit tests' entry point). It validates
// everything the wire format cannot (addresses, names, sizes) and rejects
// the whole table on the first problem: serving half a table would answer
// NXDOMAIN for the dropped names inside authoritative zones. Entries come
// back sorted by hostname so equal tables convert to equal slices.
func convertTable(t *namewire.NameTable, lim Limits) ([]nametable.Entry, []string, error) {
	lim = lim.withDefaults()
	if t == nil {
		return nil, nil, nil
	}
	if n := len(t.Table); n > lim.MaxNames {
		return nil, nil, fmt.Errorf("%w: %d names, more than the limit of %d", ErrInvalidTable, n, lim.MaxNames)
	}
	zones, err := convertZones(t.AuthoritativeZones)
	if err != nil {
		return nil, nil, err
	}
	c := newConverting(lim, len(t.Table))
	entries := make([]nametable.Entry, 0, len(t.Table))
	for host, info := range t.Table {
		var e nametable.Entry
		if err := c.add(&e, host, info); err != nil {
			return nil, nil, err
		}
		entries = append(entries, e)
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Hostname < entries[j].Hostname })
	return entries, zones, nil
}

// convertZones checks and normalizes the authoritative zones.
func convertZones(in []string) ([]string, error) {
	zones := make([]string, 0, len(in))
	for _, z := range in {
		z = strings.ToLower(strings.TrimSuffix(z, "."))
		if err := dnsname.Check(z, false); err != nil {
			return nil, fmt.Errorf("%w: zone %q: %v", ErrInvalidTable, z, err)
		}
		zones = append(zones, z)
	}
	return zones, nil
}

func convertInfo(host string, info *namewire.NameInfo, lim Limits) (nametable.Entry, error) {
	var e nametable.Entry
	err := convertInto(&e, host, info, lim)
	return e, err
}

// convertInto converts into e, reusing its slices (and those of its
// endpoints).
func convertInto(e *nametable.Entry, host string, info *namewire.NameInfo, lim Limits) error {
	host = strings.TrimSuffix(host, ".")
	if err := dnsname.Check(host, true); err != nil {
		return err
	}
	if info == nil {
		return errors.New("no name info")
	}
	*e = nametable.Entry{
		Hostname:      host,
		Registry:      info.Registry,
		ShortName:     info.Shortname,
		Namespace:     info.Namespace,
		CanonicalName: strings.TrimSuffix(info.CanonicalName, "."),
		TTL:           info.TTL,
		IPs:           e.IPs[:0],
		AltHosts:      e.AltHosts[:0],
		Ports:         e.Ports[:0],
		Endpoints:     e.Endpoints[:0],
	}
	var err error
	if e.IPs, err = parseIPs(e.IPs, info.IPs, lim.MaxIPs); err != nil {
		return err
	}
	if err := checkService(e.ShortName, e.Namespace); err != nil {
		return err
	}
	if e.AltHosts, err = convertAltHosts(e.AltHosts, info.AltHosts, lim.MaxAltHosts); err != nil {
		return err
	}
	if e.Ports, err = convertPorts(e.Ports, info.Ports, lim.MaxPorts); err != nil {
		return err
	}
	if e.Endpoints, err = convertEndpoints(e.Endpoints, info.Endpoints, lim); err != nil {
		return err
	}
	return checkCanonical(e)
}

// checkService checks a Kubernetes service's name and namespace, when
// the name is one's.
func checkService(shortName, namespace string) error {
	if shortName == "" && namespace == "" {
		return nil
	}
	if err := dnsname.CheckLabel(shortName); err != nil {
		return fmt.Errorf("shortname: %v", err)
	}
	if err := dnsname.CheckLabel(namespace); err != nil {
		return fmt.Errorf("namespace: %v", err)
	}
	return nil
}

// convertAltHosts appends the alternate names of in to out.
func convertAltHosts(out, in []string, limit int) ([]string, error) {
	if len(in) > limit {
		return out, fmt.Errorf("%d alt hosts, more than the limit of %d", len(in), limit)
	}
	for _, a := range in {
		a = strings.TrimSuffix(a, ".")
		if err := dnsname.Check(a, true); err != nil {
			return out, fmt.Errorf("alt host %q: %v", a, err)
		}
		out = append(out, a)
	}
	return out, nil
}

// convertPorts appends the ports of in to out.
func convertPorts(out []nametable.Port, in []namewire.Port, limit int) ([]nametable.Port, error) {
	if len(in) > limit {
		return out, fmt.Errorf("%d ports, more than the limit of %d", len(in), limit)
	}
	for i := range in {
		np, err := convertPort(&in[i])
		if err != nil {
			return out, err
		}
		out = append(out, np)
	}
	return out, nil
}

// convertEndpoints appends the endpoints of in to out, reusing the lists
// of addresses of the endpoints out had past its length.
func convertEndpoints(out []nametable.Endpoint, in []namewire.Endpoint, lim Limits) ([]nametable.Endpoint, error) {
	if len(in) > lim.MaxEndpoints {
		return out, fmt.Errorf("%d endpoints, more than the limit of %d", len(in), lim.MaxEndpoints)
	}
	for i := range in {
		ep := &in[i]
		if ep.Hostname != "" {
			if err := dnsname.CheckLabel(ep.Hostname); err != nil {
				return out, fmt.Errorf("endpoint %d hostname: %v", i, err)
			}
		}
		var reuse []netip.Addr
		if i < cap(out) {
			reuse = out[:i+1][i].IPs[:0]
		}
		ips, err := parseIPs(reuse, ep.IPs, lim.MaxIPs)
		if err != nil {
			return out, fmt.Errorf("endpoint %d: %v", i, err)
		}
		if len(ips) == 0 {
			return out, fmt.Errorf("endpoint %d has no address", i)
		}
		out = append(out, nametable.Endpoint{Hostname: ep.Hostname, IPs: ips, Zone: ep.Zone, ForZones: ep.ForZones})
	}
	return out, nil
}

// checkCanonical checks the canonical name of e, an ExternalName's, if
// any.
func checkCanonical(e *nametable.Entry) error {
	if e.CanonicalName == "" {
		return nil
	}
	if err := dnsname.Check(e.CanonicalName, false); err != nil {
		return fmt.Errorf("canonical name %q: %v", e.CanonicalName, err)
	}
	// An ExternalName is a CNAME: RFC 1034 section 3.6.2 forbids other
	// data beside a CNAME, so addresses here mean a broken source.
	if len(e.IPs) > 0 || len(e.Endpoints) > 0 {
		return errors.New("canonical name together with addresses")
	}
	return nil
}

func convertPort(p *namewire.Port) (nametable.Port, error) {
	if err := dnsname.CheckLabel(p.Name); err != nil {
		return nametable.Port{}, fmt.Errorf("port name %q: %v", p.Name, err)
	}
	if p.Port == 0 || p.Port > 65535 {
		return nametable.Port{}, fmt.Errorf("port %q: number %d out of range", p.Name, p.Port)
	}
	proto := strings.ToUpper(p.Protocol)
	switch proto {
	case "":
		proto = "TCP" // the Kubernetes default
	case "TCP", "UDP", "SCTP":
	default:
		return nametable.Port{}, fmt.Errorf("port %q: unknown protocol %q", p.Name, p.Protocol)
	}
	return nametable.Port{Name: p.Name, Port: uint16(p.Port), Protocol: proto}, nil
}

// parseIPs appends the addresses of in to out.
func parseIPs(out []netip.Addr, in []string, limit int) ([]netip.Addr, error) {
	if len(in) == 0 {
		return out, nil
	}
	if len(in) > limit {
		return nil, fmt.Errorf("%d addresses, more than the limit of %d", len(in), limit)
	}
	for _, s := range in {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("bad address %q", s)
		}
		// A scope means nothing in a DNS answer, and an unspecified address
		// would send clients to themselves.
		if a.Zone() != "" || a.IsUnspecified() {
			return nil, fmt.Errorf("bad address %q", s)
		}
		out = append(out, a.Unmap())
	}
	return out, nil
}
