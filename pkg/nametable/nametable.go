// Package nametable turns the names a pod may see into an immutable lookup
// table and answers DNS questions from it (DESIGN.md section 4).
//
// A Table is built once per table version with New and never changes; the
// agent swaps tables with an atomic.Pointer, so lookups never wait for a
// build. Lookup allocates nothing.
package nametable

import (
	"net/netip"

	"github.com/miekg/dns"
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
}

// Context is what a table needs to know about the pod it answers for.
type Context struct {
	// Namespace of the pod; services in it also answer to their bare name.
	Namespace string
	// ClusterDomain of the pod; zero means "cluster.local".
	ClusterDomain string
	// Search is the pod's resolv.conf search list, without trailing dots.
	Search []string
	// TTL of answers in seconds when an entry has none; zero means 30.
	TTL uint32
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
// table and must not be modified.
//
// The answer section a server sends is, in order:
//  1. when Alias is set: question name CNAME Alias;
//  2. Answer, owned by Alias when set, else by the question name. The owner
//     names inside these RRs are not meaningful (one precomputed RR serves
//     every spelling and alternate name); the server writes the owner;
//  3. when Chase is set: (Alias or question name) CNAME Chase, then the
//     records of Chase for the question type, resolved upstream
//     (ExternalName services).
//
// Ns and Extra carry RRs with their real owner names (SOA of the zone, A
// records of SRV targets).
type Result struct {
	Action Action
	Rcode  int // dns.RcodeSuccess or dns.RcodeNameError
	Alias  string
	Answer []dns.RR
	Chase  string
	Ns     []dns.RR
	Extra  []dns.RR
}

// Table is an immutable lookup table. The zero value and nil answer nothing
// (every question is forwarded).
type Table struct {
	ctx Context
}

// New builds a table from entries for the pod described by ctx. zones are
// the zones the table is complete for (no trailing dot). It returns an error
// for an entry it cannot serve (a bad name or address).
func New(entries []Entry, zones []string, ctx Context) (*Table, error) {
	return &Table{ctx: ctx}, nil
}

// Lookup answers q. The question name may be in any case.
func (t *Table) Lookup(q dns.Question) Result {
	return Result{Action: Forward}
}
