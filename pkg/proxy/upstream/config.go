package upstream

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"time"

	"github.com/meshdns/meshdns/pkg/metric"
)

// Config configures a Resolver. Every field documents its zero value.
type Config struct {
	// Upstreams are the resolvers as ParseAddr reads them: host:port (IPv6
	// in brackets), or tls://IP[:port][@server.name] for DNS over TLS.
	// Required.
	Upstreams []string
	// TLS is the base configuration of DNS-over-TLS connections: RootCAs
	// to verify the servers against (ServerName is set per upstream).
	// Nil means the system's roots.
	TLS *tls.Config
	// TLSIdleTimeout closes a DNS-over-TLS connection with no query
	// pending for this long. Zero means 10s (CoreDNS forward's expire).
	TLSIdleTimeout time.Duration
	// MaxTLSConns bounds the DNS-over-TLS connections to one upstream;
	// queries are pipelined on them, a new one opened only when every
	// open one carries 64 queries. Zero means 4.
	MaxTLSConns int
	// Timeout is how long a try waits alone before the next try goes out
	// (to the next upstream); the earlier try keeps listening, so its late
	// reply is still taken. Zero means 2s.
	Timeout time.Duration
	// ClientTimeout is how long the client waits for one reply before it
	// asks again (resolv.conf "options timeout:", glibc's default 5s).
	// Every try listens until the client's timeout less 4%, and the
	// query fails then, so the client gets our answer or our SERVFAIL
	// before it gives up on us. Zero means 5s.
	ClientTimeout time.Duration
	// Attempts is the total number of tries across upstreams, taken in a
	// random order and wrapping around, one every Timeout (or at once when
	// the previous one failed) while the window lasts. Zero means
	// len(Upstreams), at least 2 (a single upstream gets one retry for a
	// lost datagram). Ignored when Parallel is set.
	Attempts int
	// Parallel races one try to every upstream and takes the first good
	// reply. Zero (false) tries them one after another.
	Parallel bool
	// MaxConcurrent bounds the upstream queries in flight (coalesced
	// duplicates ride along for free). Beyond it AppendReply returns
	// ErrOverloaded. Zero means 1000.
	MaxConcurrent int
	// CacheSize is the most replies the cache holds. Zero means 10000;
	// negative turns the cache (and serve-stale) off.
	CacheSize int
	// MaxEntrySize is the largest reply, in bytes, the cache keeps; larger
	// ones are served but not cached, so CacheSize bounds memory to about
	// CacheSize x MaxEntrySize even against an upstream sending 64 KiB
	// replies. Zero means 4096.
	MaxEntrySize int
	// MinTTL raises the TTL of cached positive replies. Zero means no floor
	// (a TTL of 0 is then not cached).
	MinTTL time.Duration
	// MaxTTL caps the TTL of cached positive replies. Zero means 1h.
	MaxTTL time.Duration
	// MaxNegativeTTL caps the TTL of NXDOMAIN and NODATA replies, which is
	// otherwise min(SOA TTL, SOA minimum) of the authority SOA (RFC 2308
	// section 5). Zero means 5m.
	MaxNegativeTTL time.Duration
	// StaleWindow is how long after expiry a cached reply may still be
	// served when every upstream fails (RFC 8767). Zero means 1h; negative
	// turns serve-stale off.
	StaleWindow time.Duration
	// StaleAnswerAfter is how long a question with only a stale entry waits
	// for the upstreams before it is answered from that entry, the refresh
	// continuing in the background (RFC 8767 section 5, the client response
	// timer). Zero means 1.8s, the RFC's suggestion; negative turns it off
	// (stale entries are then served only when every try failed).
	StaleAnswerAfter time.Duration
	// StaleTTL is the TTL written into stale replies. Zero means 30s, the
	// value RFC 8767 section 4 recommends.
	StaleTTL time.Duration
	// Prefetch refreshes a cached reply asked for this many times in a
	// row, each within PrefetchWindow of the one before, once its TTL left
	// falls to PrefetchPercent of its TTL: the hit that finds it so
	// starts the refresh, so a hot name is answered from the cache across
	// its TTL boundary (CoreDNS cache's "prefetch AMOUNT DURATION
	// PERCENTAGE%"). Zero turns prefetch off.
	Prefetch int
	// PrefetchWindow is the most time between two hits that count as in a
	// row. Zero means 1m.
	PrefetchWindow time.Duration
	// PrefetchPercent is the share of the TTL, in percent, left when a
	// hot reply is refreshed (rounded up to whole seconds). Zero means 10.
	PrefetchPercent int
	// MaxPrefetches bounds the refreshes in flight; a hot reply that finds
	// them all busy is not refreshed (counted) and is asked for again
	// when it expires. Zero means 16.
	MaxPrefetches int
	// Now is the clock for cache ages and expiry. Nil means the wall clock,
	// read by a goroutine every 100ms (cheaper than a reading per cache
	// hit) that starts with the first query and stops at Close. Network
	// timeouts always use the real clock.
	Now func() time.Time
	// Logger receives per-query lines at Debug. Nil means slog.Default().
	Logger *slog.Logger
	// Registry receives the metrics (README.md, Metrics): the pkg/metric
	// contract, which pkg/proxy shares. Nil means they are not registered.
	Registry metric.Registry

	// window is how long a forward may take: ClientTimeout less a margin.
	window time.Duration
}

// withDefaults validates cfg and fills in the zero values.
func (cfg Config) withDefaults() (Config, error) {
	if len(cfg.Upstreams) == 0 {
		return cfg, fmt.Errorf("no upstreams")
	}
	for _, u := range cfg.Upstreams {
		if _, err := ParseAddr(u); err != nil {
			return cfg, err
		}
	}
	// Copy so a caller reusing its slice cannot change ours.
	cfg.Upstreams = append([]string(nil), cfg.Upstreams...)
	if cfg.TLSIdleTimeout <= 0 {
		cfg.TLSIdleTimeout = 10 * time.Second
	}
	if cfg.MaxTLSConns <= 0 {
		cfg.MaxTLSConns = 4
	}
	if cfg.TLS == nil {
		cfg.TLS = &tls.Config{}
	}
	if cfg.Prefetch < 0 || cfg.PrefetchPercent < 0 || cfg.PrefetchPercent > 100 {
		return cfg, fmt.Errorf("prefetch %d, percent %d: want amount >= 0, percent 0-100", cfg.Prefetch, cfg.PrefetchPercent)
	}
	if cfg.PrefetchWindow <= 0 {
		cfg.PrefetchWindow = time.Minute
	}
	if cfg.PrefetchPercent == 0 {
		cfg.PrefetchPercent = 10
	}
	if cfg.MaxPrefetches <= 0 {
		cfg.MaxPrefetches = 16
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 2 * time.Second
	}
	if cfg.ClientTimeout <= 0 {
		cfg.ClientTimeout = 5 * time.Second
	}
	cfg.window = cfg.ClientTimeout - cfg.ClientTimeout/25
	if cfg.Attempts <= 0 {
		cfg.Attempts = max(len(cfg.Upstreams), 2)
	}
	if cfg.MaxConcurrent <= 0 {
		cfg.MaxConcurrent = 1000
	}
	if cfg.CacheSize == 0 {
		cfg.CacheSize = 10000
	}
	if cfg.MaxEntrySize <= 0 {
		cfg.MaxEntrySize = 4096
	}
	if cfg.MinTTL < 0 {
		cfg.MinTTL = 0
	}
	if cfg.MaxTTL <= 0 {
		cfg.MaxTTL = time.Hour
	}
	if cfg.MaxTTL < cfg.MinTTL {
		return cfg, fmt.Errorf("max ttl %v below min ttl %v", cfg.MaxTTL, cfg.MinTTL)
	}
	if cfg.MaxNegativeTTL <= 0 {
		cfg.MaxNegativeTTL = 5 * time.Minute
	}
	if cfg.StaleWindow == 0 {
		cfg.StaleWindow = time.Hour
	}
	if cfg.StaleAnswerAfter == 0 {
		cfg.StaleAnswerAfter = 1800 * time.Millisecond
	}
	if cfg.StaleTTL <= 0 {
		cfg.StaleTTL = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return cfg, nil
}
