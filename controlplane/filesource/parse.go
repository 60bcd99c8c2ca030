package filesource

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/meshdns/meshdns/internal/dnsname"

	"sigs.k8s.io/yaml"

	"github.com/meshdns/meshdns/controlplane/registry"
	"github.com/meshdns/meshdns/pkg/nametable"
)

// File is the YAML (or JSON) shape of an entries file. The field names are
// a contract with users; add fields, never rename them.
type File struct {
	// Zones the file is complete for (optional): agents answer NXDOMAIN
	// for names inside them that no entry defines, instead of forwarding.
	Zones   []string    `json:"zones,omitempty"`
	Entries []FileEntry `json:"entries"`
}

// FileEntry is one name.
type FileEntry struct {
	// Hostname, or a wildcard "*.corp.example".
	Hostname string `json:"hostname"`
	// Addresses, IPv4 and IPv6. None: virtual IPs are allocated.
	Addresses []string `json:"addresses,omitempty"`
	// Ports are named ports, for SRV.
	Ports []FilePort `json:"ports,omitempty"`
	// Namespaces that may see the name; none means every namespace.
	Namespaces []string `json:"namespaces,omitempty"`
	// Aliases answer exactly like Hostname.
	Aliases []string `json:"aliases,omitempty"`
	// TTL of the answers in seconds; 0 means the agent's default.
	TTL uint32 `json:"ttl,omitempty"`
}

// FilePort is a named port.
type FilePort struct {
	Name string `json:"name"`
	Port int    `json:"port"`
	// Protocol is TCP (default), UDP or SCTP, in any case.
	Protocol string `json:"protocol,omitempty"`
}

// maxFileSize bounds what one file may hold; a bigger one is a mistake (or
// not an entries file) and is rejected before it is parsed.
const maxFileSize = 16 << 20

// Parse decodes and validates one entries file. Any invalid entry rejects
// the whole file: a file is the unit an operator edits, and serving half
// an edit would silently drop a name that works today (the last good
// version of the file keeps serving instead). Entries without addresses
// come back without IPs; the source allocates virtual IPs over all files.
func Parse(data []byte) (entries []registry.Entry, zones []string, err error) {
	if len(data) > maxFileSize {
		return nil, nil, fmt.Errorf("file is %d bytes, more than %d", len(data), maxFileSize)
	}
	if err := checkExplicit(data); err != nil {
		return nil, nil, err
	}
	var f File
	// Strict: a misspelt field ("adresses") must not silently turn a
	// real address into a virtual IP.
	if err := yaml.UnmarshalStrict(data, &f); err != nil {
		return nil, nil, fmt.Errorf("decode: %w", err)
	}
	var errs []error
	for i, z := range f.Zones {
		if err := dnsname.Check(z, false); err != nil {
			errs = append(errs, fmt.Errorf("zones[%d] %q: %w", i, z, err))
			continue
		}
		zones = append(zones, registry.CanonicalHost(z))
	}
	seen := map[string]int{}
	for i, fe := range f.Entries {
		e, bad := convert(fe)
		if len(bad) > 0 {
			for _, err := range bad {
				errs = append(errs, fmt.Errorf("entries[%d] %q: %w", i, fe.Hostname, err))
			}
			continue
		}
		// The same name twice is allowed only for disjoint namespaces,
		// which gives different namespaces different answers.
		key := e.Hostname + "|" + strings.Join(e.Namespaces, ",")
		if j, dup := seen[key]; dup {
			errs = append(errs, fmt.Errorf("entries[%d] %q: duplicate of entries[%d]", i, fe.Hostname, j))
			continue
		}
		seen[key] = i
		entries = append(entries, e)
	}
	if len(errs) > 0 {
		return nil, nil, errors.Join(errs...)
	}
	return entries, zones, nil
}

// Sentinels for files that say nothing. A truncated write, a ConfigMap
// key emptied by a templating mistake or an editor's blank save would
// otherwise read as "no entries" and turn every name of the file into
// NXDOMAIN in every pod; a file meant to hold no entries says so.
var (
	ErrEmpty      = errors.New("file is empty (write \"entries: []\" for a file with no entries)")
	ErrNoEntries  = errors.New("file has no entries list (write \"entries: []\" for a file with no entries)")
	errNotMapping = errors.New("file is not a mapping with an entries list")
)

// checkExplicit rejects a file that decodes to nothing (0 bytes,
// whitespace, comments only) or lacks the entries key: only a file with
// an explicit (possibly empty) entries list is valid.
func checkExplicit(data []byte) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return ErrEmpty // YAML would reject a tab here with a less useful error
	}
	j, err := yaml.YAMLToJSON(data)
	if err != nil {
		return fmt.Errorf("decode: %w", err)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(j, &top); err != nil {
		return errNotMapping
	}
	if top == nil {
		return ErrEmpty
	}
	raw, ok := top["entries"]
	if !ok || string(raw) == "null" {
		return ErrNoEntries
	}
	return nil
}

// convert checks every field of fe and returns all that is wrong with it,
// not only the first: an operator fixing an entry sees every fault at once.
func convert(fe FileEntry) (registry.Entry, []error) {
	e := registry.Entry{Entry: nametable.Entry{Registry: "File", TTL: fe.TTL}}
	var errs []error
	if err := dnsname.Check(fe.Hostname, true); err != nil {
		errs = append(errs, fmt.Errorf("hostname: %w", err))
	}
	e.Hostname = registry.CanonicalHost(fe.Hostname)
	for _, a := range fe.Addresses {
		ip, err := netip.ParseAddr(strings.TrimSpace(a))
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("address %q: not an IP address", a))
		case ip.Zone() != "":
			errs = append(errs, fmt.Errorf("address %q: zones are not allowed", a))
		default:
			e.IPs = append(e.IPs, ip.Unmap())
		}
	}
	for _, p := range fe.Ports {
		if p.Port < 1 || p.Port > 65535 {
			errs = append(errs, fmt.Errorf("port %q: %d out of range 1-65535", p.Name, p.Port))
			continue
		}
		if err := dnsname.CheckLabel(p.Name); err != nil {
			errs = append(errs, fmt.Errorf("port name %q: %w", p.Name, err))
			continue
		}
		proto := strings.ToUpper(p.Protocol)
		switch proto {
		case "":
			proto = "TCP"
		case "TCP", "UDP", "SCTP":
		default:
			errs = append(errs, fmt.Errorf("port %q: protocol %q is not TCP, UDP or SCTP", p.Name, p.Protocol))
			continue
		}
		e.Ports = append(e.Ports, nametable.Port{Name: p.Name, Port: uint16(p.Port), Protocol: proto})
	}
	for _, ns := range fe.Namespaces {
		if err := dnsname.CheckLabel(ns); err != nil {
			errs = append(errs, fmt.Errorf("namespace %q: %w", ns, err))
			continue
		}
		e.Namespaces = append(e.Namespaces, ns)
	}
	for _, a := range fe.Aliases {
		if err := dnsname.Check(a, true); err != nil {
			errs = append(errs, fmt.Errorf("alias %q: %w", a, err))
			continue
		}
		e.AltHosts = append(e.AltHosts, registry.CanonicalHost(a))
	}
	return e, errs
}
