// Package namewire holds plain Go types for the meshdns.v1 messages the
// agent reads and writes (proto/meshdns/v1/*.proto), with their binary
// protobuf encoding written on protowire and the JSON form of a NameTable
// (the --nametable-file format and the /debug/nametable dump). The agent
// uses them instead of the generated package: the protobuf runtime and the
// generated code it needs are megabytes of every sidecar's binary, for a
// handful of messages.
//
// Decoding follows proto.Unmarshal (unknown fields and fields of an
// unexpected wire type are skipped, the last of a repeated scalar wins,
// strings must be UTF-8) and the JSON decoding protojson.Unmarshal; the
// tests check both against the generated code. The one exception is
// AgentSettings, decoded strictly: a field or enum value this package does
// not know there is an ErrUnknownSetting error, because a setting the
// agent cannot enforce must fail the version, not be silently ignored.
package namewire

import "hash/maphash"

// NameTable is meshdns.v1.NameTable: everything one agent may answer.
type NameTable struct {
	// Table maps a hostname (no trailing dot, may start with "*.") to
	// what it resolves to; no value is nil.
	Table map[string]*NameInfo `json:"table,omitempty"`
	// AuthoritativeZones are the zones the table is complete for.
	AuthoritativeZones []string `json:"authoritative_zones,omitempty"`
	// Settings is how the agent behaves beyond answering the table, or
	// nil for the defaults of every setting.
	Settings *AgentSettings `json:"settings,omitempty"`
}

// NameInfo is meshdns.v1.NameInfo: one hostname. The JSON tags are the
// proto field names, the shape protojson writes with UseProtoNames.
type NameInfo struct {
	IPs           []string   `json:"ips,omitempty"`
	Registry      string     `json:"registry,omitempty"`
	Shortname     string     `json:"shortname,omitempty"`
	Namespace     string     `json:"namespace,omitempty"`
	AltHosts      []string   `json:"alt_hosts,omitempty"`
	Ports         []Port     `json:"ports,omitempty"`
	Endpoints     []Endpoint `json:"endpoints,omitempty"`
	CanonicalName string     `json:"canonical_name,omitempty"`
	// TTL in seconds; 0 means the agent's default.
	TTL uint32 `json:"ttl,omitempty"`

	// shared holds the values of Registry, Namespace, Port.Name and
	// Port.Protocol decoded into this NameInfo before, so a NameInfo
	// reused for a table's names makes each such string once, not once
	// per name (a Kubernetes table repeats a handful of them); or nil.
	shared map[string]string
	// recent finds most of shared's strings faster than the map: a
	// table's names come sorted by host, so their namespaces change from
	// one to the next, and looking them up was a good part of decoding a
	// name. Nil until shared has a few strings (a NameInfo decoding one
	// name needs none).
	recent *recentStrs
	// seenPorts are the port messages last decoded at the first indexes
	// of Ports, with their values (see decodePort); nil until a NameInfo
	// decodes a second name.
	seenPorts *[maxSeenPorts]seenPort
	// inTurn: the ports and endpoints past the ends of Ports and
	// Endpoints are those of the last Unmarshal, for the next one to
	// compare with and reuse the lists of (see nextPort); otherwise they
	// are zero, or endpoints with empty lists after resetDeep.
	inTurn bool
	// strs holds the bytes of the other strings Unmarshal made, written
	// once each and never again (see newStr); or nil.
	strs []byte
}

// maxShared bounds NameInfo.shared: its number of strings and the length
// of each.
const (
	maxShared    = 1024
	maxSharedLen = 63
)

// recentStrs is a cache of shared strings indexed by their hash, each
// slot the last string that hashed there.
type recentStrs struct {
	seed maphash.Seed
	slot [1024]string
}

// sharedStr is str for a field whose values repeat from name to name.
func (m *NameInfo) sharedStr(v []byte, what string) (string, error) {
	var slot *string
	if m.recent != nil {
		slot = &m.recent.slot[maphash.Bytes(m.recent.seed, v)%uint64(len(m.recent.slot))]
		if *slot == string(v) { // no allocation
			return *slot, nil
		}
	}
	if s, ok := m.shared[string(v)]; ok { // no allocation
		if slot != nil {
			*slot = s
		}
		return s, nil
	}
	s, err := str(v, what)
	if err != nil || len(v) > maxSharedLen || len(m.shared) >= maxShared {
		return s, err
	}
	if m.shared == nil {
		m.shared = make(map[string]string)
	}
	m.shared[s] = s
	if m.recent == nil && len(m.shared) >= 8 {
		m.recent = &recentStrs{seed: maphash.MakeSeed()}
	}
	return s, nil
}

// Port is meshdns.v1.Port: a named service port.
type Port struct {
	Name     string `json:"name,omitempty"`
	Port     uint32 `json:"port,omitempty"`
	Protocol string `json:"protocol,omitempty"`
}

// Endpoint is meshdns.v1.Endpoint: one ready backend of a headless service.
type Endpoint struct {
	Hostname string   `json:"hostname,omitempty"`
	IPs      []string `json:"ips,omitempty"`
	// Zone is the endpoint's topology zone; "" when unknown.
	Zone string `json:"zone,omitempty"`
	// ForZones are the zones the endpoint should serve (EndpointSlice
	// hints); none means no hint.
	ForZones []string `json:"for_zones,omitempty"`
}

// Reset empties m, keeping the capacity of its slices (and the strings it
// shares between decodes) for the next decode into it.
func (m *NameInfo) Reset() {
	ports, ends := m.Ports, m.Endpoints
	if m.inTurn {
		ports, ends = ports[:cap(ports)], ends[:cap(ends)]
	}
	clear(ports)
	clear(ends)
	*m = NameInfo{IPs: m.IPs[:0], AltHosts: m.AltHosts[:0], Ports: m.Ports[:0], Endpoints: m.Endpoints[:0],
		shared: m.shared, recent: m.recent, seenPorts: m.seenPorts, strs: m.strs}
}

// resetDeep is Reset keeping the capacity of the endpoints' lists too,
// for a NameInfo no caller sees (WalkJSONTableWire's): Reset does not,
// since a caller may keep a shallow copy of an endpoint.
func (m *NameInfo) resetDeep() {
	ends := m.Endpoints
	if m.inTurn {
		// Unmarshal's endpoints, past the end too; a caller may keep
		// their ForZones.
		ends = ends[:cap(ends)]
		for i := range ends {
			ends[i] = Endpoint{IPs: ends[i].IPs[:0]}
		}
	} else {
		for i := range ends {
			e := &ends[i]
			*e = Endpoint{IPs: e.IPs[:0], ForZones: e.ForZones[:0]}
		}
	}
	m.Endpoints = nil
	m.Reset()
	m.Endpoints = ends[:0]
}

// AgentIdentity is meshdns.v1.AgentIdentity, sent in a stream's first
// request.
type AgentIdentity struct {
	PodName       string
	Namespace     string
	ClusterDomain string
	InstanceID    string
	AgentVersion  string
	// Features the agent implements (AgentSettings.Requires names them).
	Features []string
}

// Request is meshdns.v1.StreamNameTableRequest: the agent's first request
// of a stream (Identity set), or the ACK or NACK (ErrorDetail set) of one
// response.
type Request struct {
	Identity      *AgentIdentity // or nil
	VersionInfo   string
	ResponseNonce string
	ErrorDetail   *ErrorDetail // or nil
	// Failing is the summary of the names that failed lately, when the
	// settings ask for it; or nil.
	Failing *FailingNames
	// RejectedVersion is a version NACKed outside the response that carried
	// it: the one the agent died running within its probation (ErrorDetail's
	// code then ABORTED); or empty.
	RejectedVersion string
}

// FailingNames is meshdns.v1.FailingNames: the names that failed most in
// one window.
type FailingNames struct {
	WindowSeconds uint32
	Names         []FailingName
}

// FailingName is meshdns.v1.FailingName: one name, one rcode, how often.
type FailingName struct {
	Name  string
	Rcode uint32
	Count uint64
}

// ErrorDetail is meshdns.v1.ErrorDetail: why a response was NACKed.
type ErrorDetail struct {
	// Code is a gRPC status code.
	Code    int32
	Message string
}

// Delta is meshdns.v1.NameTableDelta, its upserted NameInfos left in wire
// form.
type Delta struct {
	BaseVersion string
	// Upserted are the names added or changed, each key once (the last
	// occurrence wins, as in a proto map), in the order first seen.
	Upserted []RawName
	Removed  []string
	// AuthoritativeZones replaces the zones when not nil.
	AuthoritativeZones *ZoneSet
	// Settings replaces the agent's settings whole when not nil.
	Settings *AgentSettings
}

// RawName is one name of a table with its NameInfo still marshalled.
type RawName struct {
	Host string
	Info []byte // a marshalled NameInfo, checked to decode
}

// ZoneSet is meshdns.v1.ZoneSet: a zone list whose absence differs from
// an empty list.
type ZoneSet struct {
	Zones []string
}
