package namewire

import (
	"fmt"
)

// The JSON form of a NameInfo is what protojson reads: each field by its
// JSON name (lowerCamelCase) or its proto name, at most once; null for a
// field leaves it unset; no unknown fields; uint32 fields as a number with
// an integer value (1, 1.0, 1e2) or a string holding one ("30").
// DecodeJSON implements exactly that, so table files protojson accepted
// still load and those it rejected are still rejected.

// infoField is a NameInfo field's number by each name protojson accepts,
// or 0 for none: a switch, not a map, for a table file's millions of keys.
func infoField(key []byte) int {
	switch string(key) {
	case "ips":
		return fieldInfoIPs
	case "registry":
		return fieldInfoRegistry
	case "shortname":
		return fieldInfoShortname
	case "namespace":
		return fieldInfoNamespace
	case "altHosts", "alt_hosts":
		return fieldInfoAltHosts
	case "ports":
		return fieldInfoPorts
	case "endpoints":
		return fieldInfoEndpoints
	case "canonicalName", "canonical_name":
		return fieldInfoCanonical
	case "ttl":
		return fieldInfoTTL
	}
	return 0
}

// portField and endpointField are infoField for Port's and Endpoint's
// fields (their JSON and proto names are the same).
func portField(key []byte) int {
	switch string(key) {
	case "name":
		return fieldPortName
	case "port":
		return fieldPortPort
	case "protocol":
		return fieldPortProtocol
	}
	return 0
}

func endpointField(key []byte) int {
	switch string(key) {
	case "hostname":
		return fieldEndpointHostname
	case "ips":
		return fieldEndpointIPs
	case "zone":
		return fieldEndpointZone
	case "forZones", "for_zones":
		return fieldEndpointForZones
	}
	return 0
}

// fields reads an object whose keys are the names in names, each at most
// once, calling read with the field's number for every value but null
// (which leaves the field unset).
func (s *jscan) fields(names map[string]int, read func(num int) error) error {
	return s.fieldsBy(func(key []byte) int { return names[string(key)] }, read)
}

// fieldsBy is fields with the field numbers (1 to 15; 0 for an unknown
// key) given by field.
func (s *jscan) fieldsBy(field func(key []byte) int, read func(num int) error) error {
	var o objectIter
	if err := s.open(&o); err != nil {
		return err
	}
	for {
		key, num, err := s.nextField(&o, field)
		if err != nil || num == 0 {
			return err
		}
		if err := read(num); err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
	}
}

// DecodeJSON decodes the JSON form of a NameInfo (one object, nothing but
// white space after it) into m, which it resets first.
func (m *NameInfo) DecodeJSON(b []byte) error { return m.decodeJSON(b, false) }

// decodeJSON is DecodeJSON; with borrow, m's strings share b's bytes
// (jscan.borrow).
func (m *NameInfo) decodeJSON(b []byte, borrow bool) error {
	s := &jscan{b: b, borrow: borrow}
	if err := m.readJSON(s); err != nil {
		return err
	}
	if s.ws(); s.i != len(s.b) {
		return s.errorf("data after the object")
	}
	return nil
}

// readJSON reads the object at s's position into m, which it resets
// first (deeply with s.borrow: resetDeep). It, port and endpoint are
// fieldsBy written out as loops: a table file's conversion runs them
// millions of times, and calls through closures were a good part of it.
func (m *NameInfo) readJSON(s *jscan) error {
	if s.borrow {
		m.resetDeep()
	} else {
		m.Reset()
	}
	var o objectIter
	if err := s.open(&o); err != nil {
		return err
	}
	for {
		key, num, err := s.nextField(&o, infoField)
		if err != nil || num == 0 {
			return err
		}
		switch num {
		case fieldInfoIPs:
			m.IPs, err = s.strings(m.IPs)
		case fieldInfoRegistry:
			m.Registry, err = s.shared(m)
		case fieldInfoShortname:
			m.Shortname, err = s.str()
		case fieldInfoNamespace:
			m.Namespace, err = s.shared(m)
		case fieldInfoAltHosts:
			m.AltHosts, err = s.strings(m.AltHosts)
		case fieldInfoPorts:
			err = m.readPorts(s)
		case fieldInfoEndpoints:
			err = m.readEndpoints(s)
		case fieldInfoCanonical:
			m.CanonicalName, err = s.str()
		case fieldInfoTTL:
			m.TTL, err = s.uint32()
		}
		if err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
	}
}

func (m *NameInfo) readPorts(s *jscan) error {
	return s.array(func() error {
		m.Ports = append(m.Ports, Port{})
		return s.memoPort(&m.Ports[len(m.Ports)-1], m, len(m.Ports)-1)
	})
}

func (m *NameInfo) readEndpoints(s *jscan) error {
	return s.array(func() error {
		// An endpoint past the length is zero, or with resetDeep holds
		// empty lists to reuse.
		if n := len(m.Endpoints); n < cap(m.Endpoints) {
			m.Endpoints = m.Endpoints[:n+1]
		} else {
			m.Endpoints = append(m.Endpoints, Endpoint{})
		}
		return s.endpoint(&m.Endpoints[len(m.Endpoints)-1])
	})
}

// port reads a Port into p, sharing strings through info.
func (s *jscan) port(p *Port, info *NameInfo) error {
	var o objectIter
	if err := s.open(&o); err != nil {
		return err
	}
	for {
		key, num, err := s.nextField(&o, portField)
		if err != nil || num == 0 {
			return err
		}
		switch num {
		case fieldPortName:
			p.Name, err = s.shared(info)
		case fieldPortPort:
			p.Port, err = s.uint32()
		case fieldPortProtocol:
			p.Protocol, err = s.shared(info)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
	}
}

func (s *jscan) endpoint(e *Endpoint) error {
	var o objectIter
	if err := s.open(&o); err != nil {
		return err
	}
	for {
		key, num, err := s.nextField(&o, endpointField)
		if err != nil || num == 0 {
			return err
		}
		switch num {
		case fieldEndpointHostname:
			e.Hostname, err = s.str()
		case fieldEndpointIPs:
			e.IPs, err = s.strings(e.IPs)
		case fieldEndpointZone:
			e.Zone, err = s.str()
		case fieldEndpointForZones:
			e.ForZones, err = s.strings(e.ForZones)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
	}
}

// objectIter is the state of a walk of an object's fields (nextField).
type objectIter struct {
	started bool
	seen    uint16 // the field numbers read
}

// open reads an object's opening brace.
func (s *jscan) open(o *objectIter) error {
	if s.peek() != '{' {
		return s.unexpected("an object")
	}
	s.i++
	*o = objectIter{}
	return nil
}

// nextField reads up to the value of the object's next field that is not
// null (null leaves a field unset), as fieldsBy does: its key and number
// (by field; each at most once, none unknown), or a number of 0 at the
// object's end.
func (s *jscan) nextField(o *objectIter, field func(key []byte) int) (key []byte, num int, err error) {
	for {
		key, end, err := s.memberBytes(!o.started, '}')
		o.started = true
		if err != nil || end {
			return nil, 0, err
		}
		num := field(key)
		if num == 0 {
			return nil, 0, fmt.Errorf("unknown field %q", key)
		}
		if o.seen&(1<<num) != 0 {
			return nil, 0, fmt.Errorf("duplicate field %q", key)
		}
		o.seen |= 1 << num
		if !s.null() {
			return key, num, nil
		}
	}
}

// nextElem reads what comes before an array's next element: "," unless
// first; or the closing bracket (more false).
func (s *jscan) nextElem(first bool) (more bool, err error) {
	c := s.peek()
	if c == ']' {
		s.i++
		return false, nil
	}
	if !first {
		if c != ',' {
			return false, s.unexpected(`"," or "]"`)
		}
		s.i++
	}
	return true, nil
}
