package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"strings"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/meshdns/meshdns/pkg/nametable"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// adminHandler serves the admin endpoints. It is bound to localhost by
// default: /debug/lookup makes the agent query upstream on request.
func (a *Agent) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz/ready", a.handleReady)
	// Liveness says only that the process serves HTTP: a pod waiting for
	// its first table must not be restarted for it.
	mux.HandleFunc("GET /healthz/live", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /debug/nametable", a.handleNameTable)
	mux.HandleFunc("GET /debug/lookup", a.handleLookup)
	mux.HandleFunc("/debug/loglevel", a.handleLogLevel)
	mux.Handle("GET /metrics", promhttp.HandlerFor(a.cfg.Gatherer, promhttp.HandlerOpts{}))
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

func (a *Agent) handleReady(w http.ResponseWriter, _ *http.Request) {
	if !a.Ready() {
		http.Error(w, "not ready: no name table yet", http.StatusServiceUnavailable)
		return
	}
	cur := a.tables.current()
	fmt.Fprintf(w, "ready: table %s from %s\n", cur.Version, cur.Source)
}

// nameTableDump is the /debug/nametable document.
type nameTableDump struct {
	Version string    `json:"version"`
	Source  string    `json:"source"`
	Applied time.Time `json:"applied"`
	// Table is the NameTable as protojson, the --nametable-file format.
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
	cur := a.tables.current()
	if cur == nil {
		http.Error(w, "no name table yet", http.StatusServiceUnavailable)
		return
	}
	nt, err := cur.Proto()
	if err != nil {
		http.Error(w, "table "+cur.Version+": "+err.Error(), http.StatusConflict)
		return
	}
	tb, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(nt)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	d := nameTableDump{
		Version:        cur.Version,
		Source:         cur.Source,
		Applied:        cur.Applied,
		Table:          tb,
		AlternateNames: alternateNames(nt, cur.Table.Context()),
		Search:         cur.Table.Context().Search,
		Zones:          cur.Table.Zones(),
	}
	if r.URL.Query().Get("stored") == "1" {
		d.StoredNames = cur.Table.Names()
	}
	if a.disc != nil {
		d.Control = a.disc.Addr()
	}
	writeJSON(w, d)
}

// alternateNames lists the names DESIGN.md section 4 derives from each
// entry: svc.ns, svc.ns.svc and (same namespace) svc for a Kubernetes
// service in the pod's cluster domain, plus its alt_hosts.
func alternateNames(nt *meshdnsv1.NameTable, ctx nametable.Context) map[string][]string {
	out := map[string][]string{}
	for host, e := range nt.GetTable() {
		var alts []string
		short, ns := e.GetShortname(), e.GetNamespace()
		canonical := short + "." + ns + ".svc." + ctx.ClusterDomain
		if short != "" && ns != "" && strings.EqualFold(strings.TrimSuffix(host, "."), canonical) {
			alts = append(alts, short+"."+ns, short+"."+ns+".svc")
			if ns == ctx.Namespace {
				alts = append(alts, short)
			}
		}
		alts = append(alts, e.GetAltHosts()...)
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
	Error       string `json:"error,omitempty"`
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
	writeJSON(w, a.lookup(ctx, q))
}

// lookup answers q the way the DNS server would, reporting from where.
func (a *Agent) lookup(ctx context.Context, q dns.Question) lookupReport {
	rep := lookupReport{Question: q.Name + " " + dns.TypeToString[q.Qtype]}
	cur := a.tables.current()
	if cur == nil {
		if dns.IsSubDomain(dns.Fqdn(a.cfg.ClusterDomain), q.Name) {
			rep.Source, rep.Rcode = "none", dns.RcodeToString[dns.RcodeServerFailure]
			rep.Error = "no name table yet: names in the cluster domain get SERVFAIL"
			return rep
		}
	} else {
		rep.Version = cur.Version
		res := cur.Table.Lookup(q)
		if res.Action == nametable.Answer {
			rep.Source, rep.Rcode = "table", dns.RcodeToString[res.Rcode]
			owner := q.Name
			if res.Alias != "" {
				rep.Alias = res.Alias
				rep.Answer = append(rep.Answer, (&dns.CNAME{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeCNAME,
					Class: dns.ClassINET, Ttl: aliasTTL(res)}, Target: dns.Fqdn(res.Alias)}).String())
				owner = dns.Fqdn(res.Alias)
			}
			for _, rr := range res.Answer {
				c := dns.Copy(rr)
				c.Header().Name = owner
				rep.Answer = append(rep.Answer, c.String())
			}
			rep.Ns, rep.Extra = rrStrings(res.Ns), rrStrings(res.Extra)
			if res.Chase != "" {
				// As the DNS server does (pkg/proxy slowpath.go): owner
				// CNAME target, then the target's records from upstream.
				rep.Chase = res.Chase
				target := dns.Fqdn(res.Chase)
				rep.Answer = append(rep.Answer, (&dns.CNAME{Hdr: dns.RR_Header{Name: owner, Rrtype: dns.TypeCNAME,
					Class: dns.ClassINET, Ttl: aliasTTL(res)}, Target: target}).String())
				if q.Qtype != dns.TypeCNAME {
					m, src, err := a.resolver.Exchange(ctx, dns.Question{Name: target, Qtype: q.Qtype, Qclass: q.Qclass})
					rep.ChaseSource = src.String()
					if err != nil {
						rep.Rcode = dns.RcodeToString[dns.RcodeServerFailure]
						rep.Error = "chase " + res.Chase + ": " + err.Error()
					} else {
						rep.Rcode = dns.RcodeToString[m.Rcode]
						rep.Answer = append(rep.Answer, rrStrings(m.Answer)...)
						rep.Ns = rrStrings(m.Ns)
					}
				}
			}
			return rep
		}
	}
	if m, ok := a.resolver.Peek(q); ok {
		rep.Source = "cache"
		fillFromMsg(&rep, m)
		return rep
	}
	m, src, err := a.resolver.Exchange(ctx, q)
	rep.Source = src.String()
	if err != nil {
		rep.Rcode = dns.RcodeToString[dns.RcodeServerFailure]
		rep.Error = err.Error()
		return rep
	}
	fillFromMsg(&rep, m)
	return rep
}

// aliasTTL is the TTL the DNS server gives a synthesized CNAME: that of
// the records after it, else 30 (pkg/proxy answers.go).
func aliasTTL(res nametable.Result) uint32 {
	for _, rrs := range [][]dns.RR{res.Answer, res.Ns} {
		if len(rrs) > 0 {
			return rrs[0].Header().Ttl
		}
	}
	return 30
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

// handleLogLevel shows (GET) or sets (PUT/POST ?level=debug) the log level.
func (a *Agent) handleLogLevel(w http.ResponseWriter, r *http.Request) {
	if a.cfg.LogLevel == nil {
		http.Error(w, "log level is fixed", http.StatusNotImplemented)
		return
	}
	switch r.Method {
	case http.MethodGet:
	case http.MethodPut, http.MethodPost:
		var l slog.Level
		if err := l.UnmarshalText([]byte(r.URL.Query().Get("level"))); err != nil {
			http.Error(w, "level: "+err.Error(), http.StatusBadRequest)
			return
		}
		a.cfg.LogLevel.Set(l)
	default:
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	fmt.Fprintln(w, strings.ToLower(a.cfg.LogLevel.Level().String()))
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}
