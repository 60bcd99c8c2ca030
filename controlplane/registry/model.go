package registry

import (
	"bytes"
	"hash/fnv"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/meshdns/meshdns/pkg/nametable"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// Model is one version of all names from all sources. A Model never changes
// after it is published; readers share it without locks.
type Model struct {
	// Version increases by one with every published model.
	Version uint64
	// Names maps a canonical hostname (see CanonicalHost) to the entries
	// that define it, highest priority first: sources in name order, then
	// in the order the source listed them. A view takes the first one its
	// namespace may see, so two entries may give one name different answers
	// in different namespaces.
	Names map[string][]*Candidate
	// Zones is the sorted union of the zones the sources are complete for.
	Zones []string
	// Changed is the earliest source change folded into this version, zero
	// if no source said when its change happened.
	Changed time.Time
	// Built is when the model was built.
	Built time.Time
	// Touched holds the hostnames whose candidates differ from the
	// previous model's (added, removed or changed); nil for the first
	// model. Views use it to update in proportion to the change.
	Touched map[string]struct{}
}

// Candidate is one source's definition of a hostname. Candidates are shared
// between model versions while they do not change, so views compare them by
// pointer first.
type Candidate struct {
	// Source is the name the source passed to Sink.Update.
	Source string
	// Info is the wire form; never modified after construction.
	Info *meshdnsv1.NameInfo
	// Bytes is the deterministic protobuf encoding of Info.
	Bytes []byte
	// Hash is FNV-1a 64 of Bytes; stable across processes, so replicas
	// compute equal version IDs for equal tables.
	Hash uint64
	// Namespaces that may see the name, sorted; empty means every namespace.
	Namespaces []string

	entry Entry // as the source gave it, to spot unchanged entries cheaply
}

// VisibleTo reports whether a pod in namespace ns may see the candidate.
func (c *Candidate) VisibleTo(ns string) bool {
	if len(c.Namespaces) == 0 {
		return true
	}
	_, ok := slices.BinarySearch(c.Namespaces, ns)
	return ok
}

// sameAs reports whether c and o describe the same answer for the same
// namespaces, so an unchanged entry keeps its old Candidate pointer.
func (c *Candidate) sameAs(o *Candidate) bool {
	return c.Hash == o.Hash && bytes.Equal(c.Bytes, o.Bytes) && slices.Equal(c.Namespaces, o.Namespaces)
}

var deterministic = proto.MarshalOptions{Deterministic: true}

// newCandidate converts e. It fails only if the entry cannot be encoded,
// which for valid UTF-8 strings does not happen.
func newCandidate(source string, e Entry) (*Candidate, error) {
	info := ToNameInfo(e.Entry)
	b, err := deterministic.Marshal(info)
	if err != nil {
		return nil, err
	}
	h := fnv.New64a()
	h.Write(b)
	ns := slices.Clone(e.Namespaces)
	slices.Sort(ns)
	ns = slices.Compact(ns)
	return &Candidate{Source: source, Info: info, Bytes: b, Hash: h.Sum64(), Namespaces: ns, entry: e}, nil
}

// entryEqual reports whether a and b are the same entry, field by field.
func entryEqual(a, b Entry) bool {
	x, y := &a.Entry, &b.Entry
	return x.Hostname == y.Hostname && x.Registry == y.Registry && x.ShortName == y.ShortName &&
		x.Namespace == y.Namespace && x.CanonicalName == y.CanonicalName && x.TTL == y.TTL &&
		slices.Equal(x.IPs, y.IPs) && slices.Equal(x.AltHosts, y.AltHosts) && slices.Equal(x.Ports, y.Ports) &&
		slices.EqualFunc(x.Endpoints, y.Endpoints, func(p, q nametable.Endpoint) bool {
			return p.Hostname == q.Hostname && slices.Equal(p.IPs, q.IPs) &&
				p.Zone == q.Zone && slices.Equal(p.ForZones, q.ForZones)
		}) &&
		slices.Equal(a.Namespaces, b.Namespaces)
}
