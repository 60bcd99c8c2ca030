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

// jsonField is a NameInfo field's number by each name protojson accepts.
var jsonField = map[string]int{
	"ips":            fieldInfoIPs,
	"registry":       fieldInfoRegistry,
	"shortname":      fieldInfoShortname,
	"namespace":      fieldInfoNamespace,
	"altHosts":       fieldInfoAltHosts,
	"alt_hosts":      fieldInfoAltHosts,
	"ports":          fieldInfoPorts,
	"endpoints":      fieldInfoEndpoints,
	"canonicalName":  fieldInfoCanonical,
	"canonical_name": fieldInfoCanonical,
	"ttl":            fieldInfoTTL,
}

// DecodeJSON decodes the JSON form of a NameInfo (one object, nothing but
// white space after it) into m, which it resets first.
func (m *NameInfo) DecodeJSON(b []byte) error {
	m.Reset()
	s := &jscan{b: b}
	var seen uint16
	err := s.object(func(key string) error {
		num, ok := jsonField[key]
		if !ok {
			return fmt.Errorf("unknown field %q", key)
		}
		if seen&(1<<num) != 0 {
			return fmt.Errorf("duplicate field %q", key)
		}
		seen |= 1 << num
		if s.null() {
			return nil
		}
		var err error
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
			err = s.array(func() error {
				m.Ports = append(m.Ports, Port{})
				return s.port(&m.Ports[len(m.Ports)-1], m)
			})
		case fieldInfoEndpoints:
			err = s.array(func() error {
				m.Endpoints = append(m.Endpoints, Endpoint{})
				return s.endpoint(&m.Endpoints[len(m.Endpoints)-1])
			})
		case fieldInfoCanonical:
			m.CanonicalName, err = s.str()
		case fieldInfoTTL:
			m.TTL, err = s.uint32()
		}
		if err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if s.ws(); s.i != len(s.b) {
		return s.errorf("data after the object")
	}
	return nil
}

// port reads a Port into p, sharing strings through info.
func (s *jscan) port(p *Port, info *NameInfo) error {
	var seen [4]bool
	return s.object(func(key string) error {
		var num int
		switch key {
		case "name":
			num = fieldPortName
		case "port":
			num = fieldPortPort
		case "protocol":
			num = fieldPortProtocol
		default:
			return fmt.Errorf("unknown field %q", key)
		}
		if seen[num] {
			return fmt.Errorf("duplicate field %q", key)
		}
		seen[num] = true
		if s.null() {
			return nil
		}
		var err error
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
		return nil
	})
}

func (s *jscan) endpoint(e *Endpoint) error {
	var seen [3]bool
	return s.object(func(key string) error {
		var num int
		switch key {
		case "hostname":
			num = fieldEndpointHostname
		case "ips":
			num = fieldEndpointIPs
		default:
			return fmt.Errorf("unknown field %q", key)
		}
		if seen[num] {
			return fmt.Errorf("duplicate field %q", key)
		}
		seen[num] = true
		if s.null() {
			return nil
		}
		var err error
		if num == fieldEndpointHostname {
			e.Hostname, err = s.str()
		} else {
			e.IPs, err = s.strings(e.IPs)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		return nil
	})
}

// UnquoteJSON decodes b, one JSON string token with its quotes (and white
// space around it), as protojson reads a string: the keys of a table file.
func UnquoteJSON(b []byte) (string, error) {
	s := &jscan{b: b}
	v, err := s.str()
	if err != nil {
		return "", err
	}
	if s.ws(); s.i != len(s.b) {
		return "", s.errorf("data after the string")
	}
	return v, nil
}

// DecodeJSONStrings decodes b, one JSON value, as protojson reads a
// repeated string field: a list of strings, or null for none.
func DecodeJSONStrings(b []byte) ([]string, error) {
	s := &jscan{b: b}
	var out []string
	if !s.null() {
		var err error
		if out, err = s.strings(nil); err != nil {
			return nil, err
		}
	}
	if s.ws(); s.i != len(s.b) {
		return nil, s.errorf("data after the list")
	}
	return out, nil
}
