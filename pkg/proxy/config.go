package proxy

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/internal/dnsname"
	"github.com/meshdns/meshdns/internal/dnswire"
)

// Config configures a Handler and a Server. Every zero value has a default.
type Config struct {
	// Addrs are the addresses served, each over UDP and TCP. Empty means
	// 127.0.0.1:15053.
	Addrs []string
	// Resolver answers what the table does not own. Required.
	Resolver Resolver
	// ClusterDomain: before the first table, names inside it get SERVFAIL
	// (a false NXDOMAIN would be cached by the client) and the rest is
	// forwarded. Empty means "cluster.local".
	ClusterDomain string
	// UDPSockets is the number of UDP sockets per address, bound with
	// SO_REUSEPORT so the kernel spreads queries over them, each served by
	// one goroutine. Zero means GOMAXPROCS.
	UDPSockets int
	// MaxForwarding bounds the UDP queries waiting for the Resolver at
	// once; beyond it queries get REFUSED so a slow upstream cannot stall
	// table answers. Zero means 1024.
	MaxForwarding int
	// MaxTCPConns bounds concurrent client TCP connections (BIND's
	// tcp-clients is 150, Unbound's incoming-num-tcp 10 per thread). At the
	// bound the connection idle the longest is closed for the newcomer;
	// when all have a query in progress the newcomer is closed at once.
	// Zero means 256.
	MaxTCPConns int
	// MaxTCPConnsPerClient bounds the connections of one source address
	// the same way, so one client never holds every slot. Zero means
	// MaxTCPConns/2.
	MaxTCPConnsPerClient int
	// TCPIdleTimeout closes a TCP connection that sends no query for this
	// long. Zero means 10s (RFC 7766 6.2.3 suggests seconds; BIND's and
	// Unbound's tcp-idle-timeout are 30s).
	TCPIdleTimeout time.Duration
	// MaxTCPConnAge closes a TCP connection this long after it opened,
	// however busy (after answering what it has asked), so a client that
	// sends a query every few seconds does not keep a slot for ever. Zero
	// means 60s.
	MaxTCPConnAge time.Duration
	// Inherited, when set, are the sockets to serve instead of binding
	// Addrs (a supervisor's, see Sockets).
	Inherited *Sockets
	// Takeover joins sockets another process (the agent being upgraded)
	// has bound, through SO_REUSEPORT, instead of failing because the
	// address is taken; that process then hands its traffic over with
	// Drain. Every socket is bound with SO_REUSEPORT so it can be joined.
	Takeover bool
	// DrainTimeout, when set, makes Run drain (see Drain) for at most this
	// long when its context ends, before closing. Zero closes at once.
	DrainTimeout time.Duration
	// MaxAnswers bounds the precomputed answers kept per table (answers
	// are kept for questions asked twice). Zero means 10000.
	MaxAnswers int
	// MaxAnswerBytes bounds the bytes of the precomputed answers kept per
	// table (keys, packed replies and bookkeeping). The bound of a table
	// is 2 KiB per name it holds (a pod's working set: each name as itself
	// and through three search domains, A and AAAA), at least 128 KiB, at
	// most MaxAnswerBytes. Zero means 4 MiB.
	MaxAnswerBytes int
	// Logger receives errors and, at Debug, one line per query. Nil means
	// discard.
	Logger *slog.Logger
	// Registry receives the metrics (README.md). Nil means they are kept
	// but not registered anywhere.
	Registry Registry
	// QueryLog is the query log's first configuration (SetQueryLog changes
	// it). The zero value is off.
	QueryLog QueryLogConfig
	// QueryLogger receives the query log's lines, at Info (a logger not
	// enabled at Info writes none). Nil means JSON lines on stderr.
	QueryLogger *slog.Logger
	// Search is the pod's search list (resolv.conf): under a policy, a
	// forwarded name below one of these domains is denied when the name
	// the pod meant is, and answered NXDOMAIN when denied, so the
	// resolver's walk goes on (docs/policy.md). It never allows a name:
	// the pod writes its own search list. Nil: every name is judged as
	// written only.
	Search []string
	// QueryTap, when set, receives every answer the query log writes
	// (see Tap). Nil means none.
	QueryTap Tap
}

const (
	defaultAddr           = "127.0.0.1:15053"
	defaultClusterDomain  = "cluster.local"
	defaultMaxForwarding  = 1024
	defaultMaxTCPConns    = 256
	defaultTCPIdleTimeout = 10 * time.Second
	defaultMaxTCPConnAge  = 60 * time.Second
	defaultMaxAnswers     = 10000
	defaultMaxAnswerBytes = 4 << 20
)

var errNoResolver = errors.New("proxy: Config.Resolver is required")

func (cfg Config) withDefaults() (Config, error) {
	if cfg.Resolver == nil {
		return cfg, errNoResolver
	}
	if len(cfg.Addrs) == 0 {
		cfg.Addrs = []string{defaultAddr}
	}
	if cfg.ClusterDomain == "" {
		cfg.ClusterDomain = defaultClusterDomain
	}
	// The one hostname check of the module, so a cluster domain the table
	// and the agent accept is never refused here (dns.IsDomainName took
	// spaces and escapes the table cannot hold).
	if err := dnsname.Check(cfg.ClusterDomain, false); err != nil {
		return cfg, fmt.Errorf("proxy: bad cluster domain %q: %w", cfg.ClusterDomain, err)
	}
	if cfg.UDPSockets <= 0 {
		cfg.UDPSockets = runtime.GOMAXPROCS(0)
	}
	if cfg.MaxForwarding <= 0 {
		cfg.MaxForwarding = defaultMaxForwarding
	}
	if cfg.MaxTCPConns <= 0 {
		cfg.MaxTCPConns = defaultMaxTCPConns
	}
	if cfg.MaxTCPConnsPerClient <= 0 {
		cfg.MaxTCPConnsPerClient = max(cfg.MaxTCPConns/2, 1)
	}
	if cfg.TCPIdleTimeout <= 0 {
		cfg.TCPIdleTimeout = defaultTCPIdleTimeout
	}
	if cfg.MaxTCPConnAge <= 0 {
		cfg.MaxTCPConnAge = defaultMaxTCPConnAge
	}
	if cfg.MaxAnswerBytes <= 0 {
		cfg.MaxAnswerBytes = defaultMaxAnswerBytes
	}
	if cfg.MaxAnswers <= 0 {
		cfg.MaxAnswers = defaultMaxAnswers
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Registry == nil {
		cfg.Registry = nopRegistry{}
	}
	if cfg.QueryLogger == nil {
		cfg.QueryLogger = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	}
	return cfg, nil
}

// zoneWire returns the lowercased wire form of a domain name.
func zoneWire(domain string) ([]byte, error) {
	buf := make([]byte, dnswire.MaxNameLen)
	n, err := dns.PackDomainName(dns.Fqdn(strings.ToLower(domain)), buf, 0, nil, false)
	if err != nil {
		return nil, fmt.Errorf("pack %q: %w", domain, err)
	}
	return buf[:n], nil
}
