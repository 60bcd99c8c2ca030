// Package nametable turns the names a pod may see into an immutable lookup
// table and answers DNS questions from it (pkg/nametable/README.md, Answer rules).
//
// A Table is built once per table version with New and never changes; the
// agent swaps tables with an atomic.Pointer, so lookups never wait for a
// build. Lookup allocates nothing.
package nametable

import (
	"net/netip"

	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/pkg/nametable/internal/arena"
)

// Entry is one name from a source (control plane registry or a static file).
// It mirrors meshdns.v1.NameInfo without depending on the proto package.
type Entry struct {
	// Hostname without the trailing dot; may start with "*." (wildcard).
	Hostname string
	// IPs, v4 and v6. Empty for headless and ExternalName services.
	IPs []netip.Addr
	// Registry that produced the entry: "Kubernetes", "File", ...
	Registry string
	// ShortName and Namespace of a Kubernetes service; they turn on the
	// alternate names svc.ns, svc.ns.svc and (same namespace only) svc.
	ShortName string
	Namespace string
	// AltHosts answer exactly like Hostname.
	AltHosts []string
	// Ports are the named ports, for SRV.
	Ports []Port
	// Endpoints of a headless service, one per ready endpoint.
	Endpoints []Endpoint
	// CanonicalName is the CNAME target of an ExternalName service, without
	// the trailing dot.
	CanonicalName string
	// TTL in seconds; 0 means Context.TTL.
	TTL uint32
}

// Port is a named service port.
type Port struct {
	Name     string
	Port     uint16
	Protocol string // "TCP", "UDP" or "SCTP"
}

// Endpoint is one ready backend of a headless service.
type Endpoint struct {
	// Hostname of the endpoint; empty means a dashed-IP label (10-0-0-3).
	Hostname string
	IPs      []netip.Addr
	// Zone is the endpoint's topology zone; "" when unknown.
	Zone string
	// ForZones are the zones the endpoint should serve (EndpointSlice
	// hints); when set they, not Zone, say whether the endpoint is in
	// the pod's zone (zone.go).
	ForZones []string
}

// Context is what a table needs to know about the pod it answers for.
type Context struct {
	// Namespace of the pod; services in it also answer to their bare name.
	Namespace string
	// ClusterDomain of the pod; zero means "cluster.local".
	ClusterDomain string
	// Search is the pod's resolv.conf search list, with or without
	// trailing dots; entries that are not valid names (".") are ignored.
	Search []string
	// TTL of answers in seconds when an entry has none; zero means 30. It
	// is also the TTL and negative-caching time (MINIMUM) of the SOA.
	TTL uint32
	// Serial of the synthesized SOA records, for example the table
	// version; zero means 1.
	Serial uint32
	// ForwardPods forwards every name under pod.<ClusterDomain> upstream,
	// for clusters whose DNS serves verified pod records ("pods
	// verified"). By default the table synthesizes them the way
	// "pods insecure" does (kubeadm's default): a-b-c-d.<ns>.pod.<domain>
	// answers A a.b.c.d, the dashed IPv6 form AAAA, with no API data.
	ForwardPods bool
	// Zone is the topology zone of the pod; "" when unknown. A headless
	// service's address answers list its endpoints in this zone first
	// (zone.go, Result.Local).
	Zone string
}

// Action says what the agent does with a question.
type Action uint8

const (
	// Forward: the name is not ours; relay the question upstream.
	Forward Action = iota
	// Answer: answer authoritatively with Result's rcode and sections.
	Answer
)

// Result is the answer to one question. Its slices are shared with the
// table (or, for SRV, PTR, pod and ExternalName answers, built for this
// question) and must not be modified.
//
// The answer section a server sends is, in order:
//  1. when Alias is set: question name CNAME Alias;
//  2. Answer, owned by Alias when set, else by the question name. The owner
//     names inside these RRs are not meaningful (one precomputed RR serves
//     every spelling and alternate name); the server writes the owner. For
//     an ExternalName this is its CNAME to the target;
//  3. Chain, with the real owner names: what the table knows after an
//     ExternalName's CNAME (the CNAMEs of further ExternalNames, then the
//     last target's records of the question type);
//  4. when Chase is set: the records of Chase for the question type,
//     resolved upstream (the chain left the table); the upstream's rcode
//     then replaces Rcode.
//
// Ns and Extra carry RRs with their real owner names (SOA of the zone, A
// records of SRV targets).
type Result struct {
	Action Action
	// Rcode is dns.RcodeSuccess or dns.RcodeNameError (dns.RcodeServerFailure
	// for an ExternalName loop).
	Rcode  int
	Alias  string
	Answer []dns.RR
	Chain  []dns.RR
	Chase  string
	Ns     []dns.RR
	Extra  []dns.RR
	// Local is the number of records at the start of the answer's
	// address records (Answer, or Chain's after an ExternalName) that
	// are endpoints in the pod's zone (Context.Zone): a server that
	// rotates addresses rotates these among themselves and sends the
	// rest after them in order. 0: no such group, the records are one.
	Local int
}

// Table is an immutable lookup table. The zero value and nil answer nothing
// (every question is forwarded). A Table is safe for concurrent use.
type Table struct {
	pod Context // normalized: lowercase, no trailing dots, defaults set

	// The stored names (lowercase, no trailing dot), their nodes and
	// records, in the storage of internal/arena: chunks written once and
	// never moved, and the index from a name to its node. Several names
	// may share records (AltHosts). Kubernetes alternate names, SRV port
	// names, reverse names and search-path names are not stored: Lookup
	// derives them from the question (see lookup.go), so they cost no
	// memory.
	st arena.Store[node, dns.RR]
	// shapes are the shapes nodes point at; bigShape holds those of
	// nodes whose index does not fit (node.shape == bigShape), nil in
	// any real table.
	shapes   []*shape
	bigShape map[*node]*shape
	// freeShapes are the indexes of shapes that a patch dropped with the
	// headless service they were made for (nil in shapes), for the next
	// one: a shape holds its service's endpoint records, so one left
	// behind kept the storage of a replaced table alive.
	freeShapes []int
	// canonOf is the canonical name of every node with flagCopy.
	canonOf map[*node]string
	// wild maps the domain of a wildcard ("example.com" for
	// "*.example.com") to its node.
	wild map[string]*node
	// rev4 and rev6 are the reverse index (reverse.go): the address
	// records of every indexed address, v4 and v6, sorted by address, once
	// per owner name. Reverse names are not stored: a PTR answer is built
	// at query time.
	rev4 []uint32
	rev6 []uint32
	// revAddrs counts the distinct addresses in the reverse index and
	// revStored those whose reverse names are also stored names, for Len.
	revAddrs  int
	revStored int
	// revOf gives the addresses whose reverse names are stored names (an
	// entry or zone apex named like one), by node.group: every name of
	// the entry (flagRev) answers with their PTR records. Nil in any real
	// table.
	revOf map[uint64][][16]byte
	// revNs is the SOA of negative answers for reverse names outside
	// every zone: in-addr.arpa, ip6.arpa.
	revNs [2][]dns.RR
	// zones the table is complete for, longest first so the first match
	// is the closest enclosing zone.
	zones []zone
	// search holds "."+domain for each search domain, in resolv.conf order.
	search []string
	// Suffixes that turn a Kubernetes alternate name into the full one:
	// svc -> svc.<ns>.svc.<domain>, svc.ns -> svc.ns.svc.<domain>,
	// svc.ns.svc -> svc.ns.svc.<domain>. Empty when no entry has
	// alternate names.
	altBare, altNs, altSvc string
	// podZone is "pod.<cluster domain>" when the table is authoritative
	// for the cluster domain, else "".
	podZone string

	// desc counts, for names inside a zone, the names below them (ENT
	// bookkeeping for Patch, patch.go), nil until the first Patch.
	desc map[string]int32
}

// zone is one zone the table is complete for.
type zone struct {
	name string   // lowercase, no trailing dot
	soa  []dns.RR // the zone's SOA, for the authority section
}
