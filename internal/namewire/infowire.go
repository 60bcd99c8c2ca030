package namewire

import (
	"fmt"
	"unicode/utf8"
	"unsafe"

	"google.golang.org/protobuf/encoding/protowire"
)

// Unmarshal decodes a marshalled NameInfo into m, which it resets first.
//
// One NameInfo decodes a table's names one after another (an agent's
// table build does, once per name) with few allocations: Unmarshal keeps
// the capacity of m's lists, the endpoints' lists of IPs included, and
// takes a string equal to one m held before (its registry and namespace,
// the name and protocol of the port at the same index, the hostname and
// zone of the endpoint at the same index, or one of the shared strings)
// rather than making it again, and makes its other strings in a buffer
// it allocates for many names at once. The strings it sets stay valid after the
// next Unmarshal into m; its lists do not, except each endpoint's
// ForZones, which a caller may keep.
func (m *NameInfo) Unmarshal(b []byte) error {
	var registry, namespace string
	if m.inTurn {
		registry, namespace = m.Registry, m.Namespace
	}
	m.reuse()
	// Room for every string of b, which are shorter together than b.
	if cap(m.strs)-len(m.strs) < len(b) {
		size := len(b) // a NameInfo decoding one name
		if m.strs != nil {
			size = max(size, strsChunk) // one decoding names in turn
		}
		m.strs = make([]byte, 0, size)
	}
	r := fieldReader{b: b, what: "name info"}
	for {
		ok, err := r.next(false)
		if err != nil || !ok {
			return err
		}
		if r.typ == protowire.VarintType {
			if r.num == fieldInfoTTL {
				m.TTL = uint32(r.x)
			}
			continue
		}
		v := r.v
		switch r.num {
		case fieldInfoIPs:
			var s string
			s, err = m.newStr(v, "ips")
			m.IPs = append(m.IPs, s)
		case fieldInfoRegistry:
			m.Registry, err = m.sharedAs(v, registry, "registry")
		case fieldInfoShortname:
			m.Shortname, err = m.newStr(v, "shortname")
		case fieldInfoNamespace:
			m.Namespace, err = m.sharedAs(v, namespace, "namespace")
		case fieldInfoAltHosts:
			var s string
			s, err = m.newStr(v, "alt_hosts")
			m.AltHosts = append(m.AltHosts, s)
		case fieldInfoPorts:
			err = m.decodePort(v)
		case fieldInfoEndpoints:
			e, prev := m.nextEndpoint()
			err = e.unmarshal(v, m, &prev)
		case fieldInfoCanonical:
			m.CanonicalName, err = m.newStr(v, "canonical_name")
		}
		if err != nil {
			return err
		}
	}
}

// reuse is Reset for Unmarshal: after an Unmarshal it leaves the ports
// and endpoints past the lists' ends as they were, for nextPort and
// nextEndpoint.
func (m *NameInfo) reuse() {
	if !m.inTurn {
		// After DecodeJSON or a Reset: Reset leaves nothing past the
		// ends to compare with or reuse (a caller may keep a shallow
		// copy of an endpoint DecodeJSON made).
		m.Reset()
		m.inTurn = true
		return
	}
	m.IPs, m.AltHosts, m.Ports, m.Endpoints = m.IPs[:0], m.AltHosts[:0], m.Ports[:0], m.Endpoints[:0]
	m.Registry, m.Shortname, m.Namespace, m.CanonicalName, m.TTL = "", "", "", "", 0
}

// nextPort appends a zero port to m.Ports and returns it, with the port
// that was at its index before the reset (zero if none).
func (m *NameInfo) nextPort() (p *Port, prev Port) {
	n := len(m.Ports)
	if n < cap(m.Ports) {
		m.Ports = m.Ports[:n+1]
		prev = m.Ports[n]
		m.Ports[n] = Port{}
	} else {
		m.Ports = append(m.Ports, Port{})
	}
	return &m.Ports[n], prev
}

// A table repeats its port messages from name to name, byte for byte
// (http, 80, TCP), and decoding them was a good part of decoding a name.
// A NameInfo decoding names in turn remembers the message last decoded
// at each of the first indexes of its ports, and its value: the same
// bytes at the same index are the same port, copied rather than
// decoded.
const (
	maxSeenPorts   = 4
	maxSeenPortLen = 32
)

// seenPort is one port message remembered, and its value.
type seenPort struct {
	raw  [maxSeenPortLen]byte
	n    int // of raw, or -1 for none
	port Port
}

// decodePort decodes v, the message of a port, into a port appended to
// m.Ports.
func (m *NameInfo) decodePort(v []byte) error {
	k := len(m.Ports)
	if m.seenPorts == nil && k < cap(m.Ports) {
		// A port decoded at this index before: names in turn.
		m.seenPorts = new([maxSeenPorts]seenPort)
		for i := range m.seenPorts {
			m.seenPorts[i].n = -1
		}
	}
	p, prev := m.nextPort()
	var seen *seenPort
	if m.seenPorts != nil && k < maxSeenPorts {
		seen = &m.seenPorts[k]
		if seen.n == len(v) && string(seen.raw[:seen.n]) == string(v) {
			*p = seen.port
			return nil
		}
	}
	if err := p.unmarshal(v, m, &prev); err != nil {
		return err
	}
	if seen != nil {
		seen.n = -1
		if len(v) <= maxSeenPortLen {
			seen.n = copy(seen.raw[:], v)
			seen.port = *p
		}
	}
	return nil
}

// nextEndpoint is nextPort for m.Endpoints; the new endpoint takes over
// the previous one's list of IPs, emptied, but not its ForZones.
func (m *NameInfo) nextEndpoint() (e *Endpoint, prev Endpoint) {
	n := len(m.Endpoints)
	if n < cap(m.Endpoints) {
		m.Endpoints = m.Endpoints[:n+1]
		prev = m.Endpoints[n]
	} else {
		m.Endpoints = append(m.Endpoints, Endpoint{})
	}
	e = &m.Endpoints[n]
	*e = Endpoint{IPs: prev.IPs[:0]}
	return e, prev
}

// strsChunk is the size of the buffers of strings of a NameInfo that
// decodes names in turn: one allocation for a hundred names or so.
const strsChunk = 4096

// newStr is str making the string in m.strs: appended there, past every
// string made before, and never written again, so the strings stay
// valid when a new buffer replaces a full one (the old one lives as long
// as one of its strings). A table's conversion makes millions of short
// strings: one allocation each was a good part of its cost.
func (m *NameInfo) newStr(v []byte, what string) (string, error) {
	if !utf8.Valid(v) {
		return "", fmt.Errorf("%s: %w", what, ErrInvalidUTF8)
	}
	if len(v) == 0 {
		return "", nil
	}
	if cap(m.strs)-len(m.strs) < len(v) { // not after Unmarshal's check
		m.strs = make([]byte, 0, max(len(v), strsChunk))
	}
	at := len(m.strs)
	m.strs = append(m.strs, v...)
	return unsafe.String(&m.strs[at], len(v)), nil
}

// sameStr is newStr for a field that was prev in the name decoded
// before: an equal value is prev, not a new string.
func (m *NameInfo) sameStr(v []byte, prev, what string) (string, error) {
	if string(v) == prev { // no allocation; prev is UTF-8
		return prev, nil
	}
	return m.newStr(v, what)
}

// sharedAs is sharedStr for a field that was prev in the name decoded
// before, which it compares first: most often the same value, found
// without the lookup.
func (m *NameInfo) sharedAs(v []byte, prev, what string) (string, error) {
	if string(v) == prev {
		return prev, nil
	}
	return m.sharedStr(v, what)
}

// unmarshal decodes b into p, sharing strings through info and prev.
func (p *Port) unmarshal(b []byte, info *NameInfo, prev *Port) error {
	r := fieldReader{b: b, what: "port"}
	for {
		ok, err := r.next(false)
		if err != nil || !ok {
			return err
		}
		switch {
		case r.num == fieldPortPort && r.typ == protowire.VarintType:
			p.Port = uint32(r.x)
		case r.num == fieldPortName && r.typ == protowire.BytesType:
			p.Name, err = info.sharedAs(r.v, prev.Name, "port name")
		case r.num == fieldPortProtocol && r.typ == protowire.BytesType:
			p.Protocol, err = info.sharedAs(r.v, prev.Protocol, "port protocol")
		}
		if err != nil {
			return err
		}
	}
}

// unmarshal decodes b into e, taking equal strings from prev and making
// the others through info.
func (e *Endpoint) unmarshal(b []byte, info *NameInfo, prev *Endpoint) error {
	r := fieldReader{b: b, what: "endpoint"}
	for {
		ok, err := r.next(false)
		if err != nil || !ok {
			return err
		}
		if r.typ != protowire.BytesType {
			continue
		}
		switch r.num {
		case fieldEndpointHostname:
			e.Hostname, err = info.sameStr(r.v, prev.Hostname, "endpoint hostname")
		case fieldEndpointIPs:
			var s string
			s, err = info.newStr(r.v, "endpoint ips")
			e.IPs = append(e.IPs, s)
		case fieldEndpointZone:
			e.Zone, err = info.sameStr(r.v, prev.Zone, "endpoint zone")
		case fieldEndpointForZones:
			var s string
			s, err = info.newStr(r.v, "endpoint for_zones")
			e.ForZones = append(e.ForZones, s)
		}
		if err != nil {
			return err
		}
	}
}
