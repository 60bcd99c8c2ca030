package agent

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/meshdns/meshdns/internal/dnsname"

	"github.com/google/uuid"

	"github.com/meshdns/meshdns/agent/ingest"
	meshmetrics "github.com/meshdns/meshdns/internal/metrics"
	"github.com/meshdns/meshdns/iptables"
	"github.com/meshdns/meshdns/pkg/proxy"
	"github.com/meshdns/meshdns/pkg/proxy/upstream"
)

// Config configures an Agent. Zero fields take the default named beside
// them; the command line (cmd/internal/agentcmd/agent.go) maps one flag to one field.
type Config struct {
	// DNSAddrs are the addresses served over UDP and TCP;
	// 127.0.0.1:15053, plus [::1]:15053 when the upstreams include an IPv6
	// nameserver and the host has IPv6 loopback (the pod's resolver may
	// then send queries over IPv6, which ip6tables redirects there).
	DNSAddrs []string
	// AdminAddr serves /healthz/ready, /debug/* and /metrics;
	// 127.0.0.1:15020. "-" turns the admin server off. It must be a
	// loopback address: the debug endpoints reveal the names the pod may
	// see, change the log level and resolve on request (kubectl exec or
	// port-forward reach it). "localhost" listens on 127.0.0.1, never
	// where /etc/hosts points it.
	AdminAddr string
	// ProbeAddr, when set, serves only /healthz/ready, /healthz/live and
	// /metrics, on any address (the pod IP, for the kubelet's probes and
	// Prometheus): nothing there changes state or reveals names. "" turns
	// it off.
	ProbeAddr string

	// ResolvConf is the pod's resolv.conf: upstream nameservers, search
	// list and ndots; /etc/resolv.conf.
	ResolvConf string
	// VMResolvConf holds the upstreams on a VM where the agent serves port
	// 53 and /etc/resolv.conf points at it: when a DNS address uses port 53
	// and this file exists, its nameservers are the upstreams;
	// /var/lib/meshdns/resolv.conf.
	VMResolvConf string
	// Upstreams (host:port, or tls://IP[:port][@server.name] for DNS
	// over TLS: upstream.ParseAddr) override the nameservers of
	// ResolvConf; its search list still applies.
	Upstreams []string
	// UpstreamCA is a PEM file of the CAs that verify DNS-over-TLS
	// upstreams (of Upstreams and of forwarding rules); "" means the
	// system's roots.
	UpstreamCA string

	// Namespace and PodName of the pod the agent serves.
	Namespace string
	PodName   string
	// ClusterDomain; cluster.local.
	ClusterDomain string
	// TTL of table answers whose name has none, in seconds; 30.
	TTL uint32
	// ForwardPods forwards names under pod.<ClusterDomain> to the cluster
	// DNS (clusters running "pods verified") instead of synthesizing them
	// from the name ("pods insecure", the default).
	ForwardPods bool
	// IgnorePodZone answers headless services in the table's order even
	// when the control plane names the pod's zone (by default endpoints
	// in that zone come first; pkg/nametable zone.go).
	IgnorePodZone bool

	// NameTableFile is a static table (protojson meshdns.v1.NameTable),
	// reloaded when it changes. Exclusive with ControlPlanes.
	NameTableFile string
	// FilePollInterval is how often NameTableFile is checked besides the
	// file system events (which network and some overlay file systems
	// never deliver); 5s.
	FilePollInterval time.Duration

	// ControlPlanes are host:port addresses of the NameDiscoveryService,
	// tried in order.
	ControlPlanes []string
	// CACert, TLSCert and TLSKey turn on TLS (and mTLS) to the control plane.
	CACert  string
	TLSCert string
	TLSKey  string
	// TokenFile is a bearer token (the pod's projected ServiceAccount
	// token) presented to the control plane, re-read at every reconnect;
	// needs TLS (CACert).
	TokenFile string
	// StateDir keeps the last table from the control plane across
	// restarts; "" keeps nothing.
	StateDir string
	// ReadyGrace bounds how long a table restored from StateDir serves
	// before the agent reports ready without a control plane; 10s.
	ReadyGrace time.Duration
	// Probation is how long a version from the control plane must serve
	// without the agent dying before a restart restores it (the last
	// known good); a start after a death within it restores the previous
	// version and NACKs this one (agent/discovery); 30s, negative: none.
	Probation time.Duration

	// UpstreamTimeout is how long a try waits alone before the next try
	// goes out; earlier tries keep listening until the pod's resolver
	// timeout (resolv.conf "options timeout:", 5s) less 4%; 2s.
	UpstreamTimeout time.Duration
	// Sockets, when set, are DNS sockets bound by a supervisor that
	// outlives this process (meshdns agent --supervise); DNSAddrs must
	// name their addresses.
	Sockets *proxy.Sockets
	// Takeover joins the DNS sockets of a running agent (SO_REUSEPORT)
	// instead of failing because the address is taken: the graceful
	// upgrade, where the old agent, stopped once this one is ready, hands
	// its traffic over without losing a query.
	Takeover bool
	// ParallelUpstreams races every upstream instead of trying them in turn.
	ParallelUpstreams bool
	// CacheSize is the number of forwarded replies cached; 10000, negative
	// turns the cache off.
	CacheSize int
	// Prefetch, PrefetchWindow and PrefetchPercent refresh a cached reply
	// asked for Prefetch times in a row (each within PrefetchWindow) once
	// PrefetchPercent of its TTL is left (upstream.Config); 0 is off.
	Prefetch        int
	PrefetchWindow  time.Duration
	PrefetchPercent int

	// Limits bound the tables accepted.
	Limits ingest.Limits

	// IPTablesCheckInterval, when positive, re-checks the pod's capture
	// rules (IPTables) that often and reports drift in the
	// meshdns_iptables_* metrics; 0 (the default) checks nothing. Reading
	// the rules needs CAP_NET_ADMIN: without it every check fails and
	// counts as an error.
	IPTablesCheckInterval time.Duration
	// IPTablesRepair re-applies the rules when a check finds drift; off by
	// default (writing the rules needs CAP_NET_ADMIN too).
	IPTablesRepair bool
	// IPTables describes the rules as the init container applied them
	// (cmd/meshdns builds both from the same flags); used only when
	// IPTablesCheckInterval is positive. A nil Logger is the agent's.
	IPTables iptables.Config

	// Version is the build version, reported to the control plane.
	Version string
	// InstanceID names this agent process: it is sent to the control plane
	// and tags every log line (per-query debug lines included) so both
	// sides' logs can be joined; a new UUID.
	InstanceID string
	// Logger receives the agent's logs; slog.Default() when nil.
	Logger *slog.Logger
	// LogLevel, when set, is changed at runtime by /debug/loglevel.
	LogLevel *slog.LevelVar
	// QueryLog is the query log's first configuration (off by default);
	// /debug/querylog and SetQueryLog change it at runtime.
	QueryLog proxy.QueryLogConfig
	// QueryLogOutput receives the query log's JSON lines, tagged with the
	// pod's namespace and name; os.Stderr when nil.
	QueryLogOutput io.Writer
	// QueryLogNoLines writes no JSON lines for the query log (with
	// Dnstap, frames only); off by default.
	QueryLogNoLines bool
	// PodAnnotations, when set, is the pod's annotations file of a
	// downward API volume: its meshdns.io/query-log* annotations set the
	// query log while the agent runs (querylogsources.go).
	PodAnnotations string
	// Dnstap, when set, sends the answers the query log writes as dnstap
	// frames to a collector: unix:///path or tcp://host:port.
	Dnstap string
	// Registry receives every metric (agent, proxy, upstream, discovery)
	// and serves them on /metrics; a new registry when nil.
	Registry *meshmetrics.Registry
	// Now is the clock; time.Now.
	Now func() time.Time
}

const (
	defaultDNSAddr      = "127.0.0.1:15053"
	defaultAdminAddr    = "127.0.0.1:15020"
	defaultResolvConf   = "/etc/resolv.conf"
	defaultVMResolvConf = "/var/lib/meshdns/resolv.conf"
)

func (cfg Config) withDefaults() (Config, error) {
	cfg, err := cfg.withAddrs()
	if err != nil {
		return cfg, err
	}
	if cfg.ClusterDomain == "" {
		cfg.ClusterDomain = "cluster.local"
	}
	cfg.ClusterDomain = strings.ToLower(strings.TrimSuffix(cfg.ClusterDomain, "."))
	if err := dnsname.Check(cfg.ClusterDomain, false); err != nil {
		return cfg, fmt.Errorf("cluster domain %q: %w", cfg.ClusterDomain, err)
	}
	if cfg.TTL == 0 {
		cfg.TTL = 30
	}
	if cfg.NameTableFile != "" && len(cfg.ControlPlanes) > 0 {
		// Two sources would fight over one table; a merge rule would be a
		// surprise either way.
		return cfg, errors.New("a name table file and a control plane exclude each other")
	}
	if cfg.FilePollInterval <= 0 {
		cfg.FilePollInterval = 5 * time.Second
	}
	if cfg.ReadyGrace <= 0 {
		cfg.ReadyGrace = 10 * time.Second
	}
	if (cfg.TLSCert == "") != (cfg.TLSKey == "") {
		return cfg, errors.New("--tls-cert and --tls-key go together")
	}
	if cfg.InstanceID == "" {
		cfg.InstanceID = uuid.NewString()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.Logger = cfg.Logger.With("instance_id", cfg.InstanceID)
	if cfg.IPTablesCheckInterval < 0 {
		return cfg, fmt.Errorf("iptables check interval %v is negative", cfg.IPTablesCheckInterval)
	}
	if cfg.IPTables.Logger == nil {
		cfg.IPTables.Logger = cfg.Logger
	}
	if cfg.Registry == nil {
		cfg.Registry = meshmetrics.NewRegistry()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return cfg, nil
}

// withAddrs checks the addresses and files of cfg, with their defaults.
func (cfg Config) withAddrs() (Config, error) {
	if len(cfg.DNSAddrs) == 0 {
		cfg.DNSAddrs = []string{defaultDNSAddr}
	}
	for _, a := range cfg.DNSAddrs {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return cfg, fmt.Errorf("dns address %q: %w", a, err)
		}
	}
	if cfg.AdminAddr == "" {
		cfg.AdminAddr = defaultAdminAddr
	}
	admin, err := adminListenAddr(cfg.AdminAddr)
	if err != nil {
		return cfg, fmt.Errorf("admin address: %w", err)
	}
	cfg.AdminAddr = admin
	if cfg.ProbeAddr != "" {
		if _, _, err := net.SplitHostPort(cfg.ProbeAddr); err != nil {
			return cfg, fmt.Errorf("probe address %q: %w", cfg.ProbeAddr, err)
		}
	}
	if cfg.ResolvConf == "" {
		cfg.ResolvConf = defaultResolvConf
	}
	if cfg.VMResolvConf == "" {
		cfg.VMResolvConf = defaultVMResolvConf
	}
	for _, u := range cfg.Upstreams {
		if _, err := upstream.ParseAddr(u); err != nil {
			return cfg, err
		}
	}
	return cfg, nil
}
