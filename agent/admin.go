package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/internal/adminhttp"
	"github.com/meshdns/meshdns/internal/namewire"
	"github.com/meshdns/meshdns/pkg/nametable"
	"github.com/meshdns/meshdns/pkg/proxy"
)

// adminHandler serves the admin endpoints, on loopback only (checked in
// Config) and behind adminhttp.Guard (a loopback Host, no cross-site
// browser request, changes by PUT or DELETE only): /debug/nametable shows
// the names the pod may see, /debug/loglevel turns on per-query logs,
// /debug/querylog raises the query log, /debug/lookup resolves on
// request. Every process of the pod reaches it, so nothing on it lowers
// what the operator logs. The probe port (probeHandler) serves the
// harmless part on the pod IP.
func (a *Agent) adminHandler() http.Handler {
	mux := http.NewServeMux()
	a.probeRoutes(mux)
	mux.HandleFunc("GET /debug/nametable", a.handleNameTable)
	mux.Handle("GET /debug/lookup", a.aux.lookups.wrap(http.HandlerFunc(a.handleLookup)))
	adminhttp.LogLevel{Var: a.cfg.LogLevel, Floor: a.aux.levelFloor, Logger: a.log}.Register(mux)
	mux.HandleFunc("GET /debug/querylog", a.handleQueryLog)
	mux.HandleFunc("PUT /debug/querylog", a.handleQueryLog)
	mux.HandleFunc("DELETE /debug/querylog", a.handleQueryLog)
	adminhttp.Pprof(mux)
	return adminhttp.Guard(mux)
}

func (a *Agent) handleReady(w http.ResponseWriter, _ *http.Request) {
	if !a.Ready() {
		http.Error(w, "not ready: no name table yet", http.StatusServiceUnavailable)
		return
	}
	cur := a.run.tables.Current()
	fmt.Fprintf(w, "ready: table %s from %s\n", cur.Version, cur.Source)
}

// nameTableDump is the /debug/nametable document.
type nameTableDump struct {
	Version string    `json:"version"`
	Source  string    `json:"source"`
	Applied time.Time `json:"applied"`
	// Table is the NameTable in the --nametable-file format, with the
	// proto field names (protojson's UseProtoNames).
	Table json.RawMessage `json:"table"`
	// AlternateNames lists per hostname the further names it answers to,
	// generated from short name, namespace and alt_hosts. Every name and
	// alternate also answers under each search domain (with a CNAME).
	AlternateNames map[string][]string `json:"alternate_names,omitempty"`
	Search         []string            `json:"search"`
	Zones          []string            `json:"zones"`
	// StoredNames are every name the built table holds (SRV, PTR,
	// endpoint names...); only with ?stored=1.
	StoredNames []string `json:"stored_names,omitempty"`
	Control     string   `json:"control_plane,omitempty"`
}

func (a *Agent) handleNameTable(w http.ResponseWriter, r *http.Request) {
	cur := a.run.tables.Current()
	if cur == nil {
		http.Error(w, "no name table yet", http.StatusServiceUnavailable)
		return
	}
	nt, err := cur.Dump()
	if err != nil {
		http.Error(w, "table "+cur.Version+": "+err.Error(), http.StatusConflict)
		return
	}
	tb, err := json.Marshal(nt)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	d := nameTableDump{
		Version:        cur.Version,
		Source:         cur.Source,
		Applied:        cur.Applied,
		Table:          tb,
		AlternateNames: alternateNames(nt, cur.Table),
		Search:         cur.Table.Context().Search,
		Zones:          cur.Table.Zones(),
	}
	if r.URL.Query().Get("stored") == "1" {
		d.StoredNames = cur.Table.Names()
	}
	if a.run.disc != nil {
		d.Control = a.run.disc.Addr()
	}
	adminhttp.WriteJSON(w, d)
}

// alternateNames lists, for each entry, the other names it answers to:
// the table's Kubernetes alternate names, then its alt_hosts.
func alternateNames(nt *namewire.NameTable, t *nametable.Table) map[string][]string {
	out := map[string][]string{}
	for host, e := range nt.Table {
		alts := t.AlternateNames(strings.ToLower(strings.TrimSuffix(host, ".")))
		if e != nil {
			alts = append(alts, e.AltHosts...)
		}
		if len(alts) > 0 {
			out[host] = alts
		}
	}
	return out
}

// lookupReport is the /debug/lookup document: how the agent would answer.
type lookupReport struct {
	Question string `json:"question"`
	// Source is where the answer comes from: table, cache, upstream, or
	// none (SERVFAIL before the first table).
	Source string   `json:"source"`
	Rcode  string   `json:"rcode"`
	Answer []string `json:"answer,omitempty"`
	Ns     []string `json:"ns,omitempty"`
	Extra  []string `json:"extra,omitempty"`
	// Alias and Chase explain search-path and ExternalName answers.
	Alias string `json:"alias,omitempty"`
	Chase string `json:"chase,omitempty"`
	// ChaseSource says where the ExternalName target's records came from.
	ChaseSource string `json:"chase_source,omitempty"`
	Version     string `json:"table_version,omitempty"`
	// Policy says how the DNS policy judged the query: the action, the
	// deciding rule or default; absent without a policy.
	Policy *proxy.PolicyVerdict `json:"policy,omitempty"`
	// Upstreams are where the question goes when it is forwarded (the
	// forwarding rule's upstreams for a name under its domains).
	Upstreams []string `json:"upstreams,omitempty"`
	Error     string   `json:"error,omitempty"`
}

func (a *Agent) handleLookup(w http.ResponseWriter, r *http.Request) {
	name := r.URL.Query().Get("name")
	if _, ok := dns.IsDomainName(name); name == "" || !ok {
		http.Error(w, "name: want a domain name", http.StatusBadRequest)
		return
	}
	qtype := dns.TypeA
	if t := r.URL.Query().Get("type"); t != "" {
		v, ok := dns.StringToType[strings.ToUpper(t)]
		if !ok {
			http.Error(w, fmt.Sprintf("type: unknown type %q", t), http.StatusBadRequest)
			return
		}
		qtype = v
	}
	q := dns.Question{Name: dns.Fqdn(name), Qtype: qtype, Qclass: dns.ClassINET}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	adminhttp.WriteJSON(w, a.lookup(ctx, q))
}

// lookup answers q with the DNS server's own handler, and adds what the
// table says about the question (search alias, ExternalName chase).
func (a *Agent) lookup(ctx context.Context, q dns.Question) lookupReport {
	rep := lookupReport{Question: q.Name + " " + dns.TypeToString[q.Qtype]}
	if cur := a.run.tables.Current(); cur != nil {
		rep.Version = cur.Version
		if res := cur.Table.Lookup(q); res.Action == nametable.Answer {
			rep.Alias, rep.Chase = res.Alias, res.Chase
		}
	}
	m, src, verdict, err := a.run.server.Handler().ExplainPolicy(ctx, q)
	rep.Source = src
	if verdict.Judged {
		rep.Policy = &verdict
	}
	if err != nil {
		rep.Rcode = dns.RcodeToString[dns.RcodeServerFailure]
		rep.Error = err.Error()
		return rep
	}
	switch {
	case rep.Chase != "":
		// The CNAMEs come from the table, the target's records from src.
		rep.Source, rep.ChaseSource = "table", src
		rep.Upstreams = a.run.resolver.RouteOf(rep.Chase)
	case src == "cache" || src == "upstream":
		rep.Upstreams = a.run.resolver.RouteOf(q.Name)
	}
	fillFromMsg(&rep, m)
	if m.Rcode == dns.RcodeServerFailure && src == "local" {
		rep.Error = "no name table yet: names in the cluster domain get SERVFAIL"
	}
	return rep
}

func fillFromMsg(rep *lookupReport, m *dns.Msg) {
	rep.Rcode = dns.RcodeToString[m.Rcode]
	rep.Answer, rep.Ns, rep.Extra = rrStrings(m.Answer), rrStrings(m.Ns), rrStrings(m.Extra)
}

func rrStrings(rrs []dns.RR) []string {
	var out []string
	for _, rr := range rrs {
		if rr.Header().Rrtype == dns.TypeOPT {
			continue
		}
		out = append(out, rr.String())
	}
	return out
}
