// Package discovery is the agent's client of meshdns.v1.NameDiscoveryService:
// it keeps one stream to a control plane open, turns full tables and deltas
// into table versions for the agent (Version), ACKs or NACKs each
// response, and persists the last applied table so a restarted agent
// serves at once.
package discovery

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/meshdns/meshdns/internal/certfile"
	meshmetrics "github.com/meshdns/meshdns/internal/metrics"
	"github.com/meshdns/meshdns/internal/namewire"
)

// Config configures a Client. Zero fields take the default named beside them.
type Config struct {
	// Addrs are the control plane addresses (host:port). Each connection
	// tries them in order, so the first reachable one wins. Required.
	Addrs []string
	// PodName, Namespace and ClusterDomain identify the agent; the control
	// plane scopes its view by Namespace.
	PodName       string
	Namespace     string
	ClusterDomain string
	// AgentVersion is the build version reported in the identity.
	AgentVersion string
	// InstanceID tags this agent's stream on both sides; a new UUID.
	InstanceID string
	// Features are those the agent implements, advertised in its
	// identity: a version whose settings require another one is NACKed
	// (and the previous one kept).
	Features []string

	// Apply applies a table version: the full table received, or the
	// table a delta makes of the one applied before (built by the client,
	// in the state dir or in memory). It is called from Run's goroutine
	// (and from Restore), one call at a time. The version stays walkable
	// while it is the one applied, and no longer. An error rejects it: the
	// client NACKs it and keeps the previous one. Required.
	Apply func(v *Version) error

	// StateDir holds the last applied table; "" disables persistence.
	StateDir string
	// Probation is how long the agent must serve a version from the
	// control plane without its process dying before the version is the
	// one a restart restores (the last known good); 30s. Until then the
	// state dir keeps the previous one beside it, and a start after a
	// death within the probation restores that one and NACKs the version
	// (probation.go). Negative: no probation. Without a state dir nothing
	// outlives the process, and there is no probation.
	Probation time.Duration

	// CACert verifies the control plane; TLSCert and TLSKey are the agent's
	// client certificate (mTLS). Any of them set turns TLS on; without
	// CACert the system roots verify the server. The files are checked
	// for every new connection (internal/certfile), so rotated
	// certificates take effect at the next reconnect without a restart.
	CACert  string
	TLSCert string
	TLSKey  string
	// ServerName overrides the name verified in the server certificate;
	// default the host of the address dialled.
	ServerName string
	// TokenFile holds a bearer token (a projected ServiceAccount token with
	// the control plane's audience) sent with every stream as
	// "authorization: Bearer". It is read again for every new stream, so
	// the kubelet's rotation is picked up at the next reconnect. Needs
	// TLS: a token is never sent in plaintext.
	TokenFile string

	// ConnectTimeout bounds one connection attempt, so a dead address
	// fails over quickly; 5s.
	ConnectTimeout time.Duration
	// MinBackoff and MaxBackoff bound the jittered exponential wait after
	// a round in which no address delivered a response; 250ms and 30s.
	MinBackoff time.Duration
	MaxBackoff time.Duration
	// MaxMessageSize bounds one response; 256 MiB. gRPC's usual default of
	// 4 MiB would refuse the full table of a cluster with ~60,000 services.
	// A response is streamed to the state dir as it arrives, so the limit
	// costs no memory.
	MaxMessageSize int
	// KeepaliveTime is how long the connection may bring nothing from the
	// control plane before the agent sends an HTTP/2 PING, and
	// KeepaliveTimeout how long it then waits for the ack before it drops
	// the connection and reconnects (a control plane that stopped
	// answering, a lost route); 30s and 10s. The control plane must permit
	// pings this often (its keepalive enforcement's minimum, 10s).
	KeepaliveTime    time.Duration
	KeepaliveTimeout time.Duration
	// ReceiveWindow is the HTTP/2 receive window of the stream and of the
	// connection: what the control plane may send ahead of the agent's
	// reads, and so the most the transport buffers; 1 MiB. It only has
	// to cover the round trip of the window updates (1 MiB per ms is
	// 1 GB/s).
	ReceiveWindow int

	// Logger receives connection and update logs; slog.Default() when nil.
	// The caller tags it with the instance id when it wants that.
	Logger *slog.Logger
	// Registry receives the client's metrics; none when nil.
	Registry *meshmetrics.Registry
	// Now is the clock; time.Now.
	Now func() time.Time
}

// Client streams NameTables from the control plane. Create it with New,
// optionally call Restore, then Run.
type Client struct {
	cfg     Config
	log     *slog.Logger
	metrics *metrics
	synced  chan struct{}
	tls     *certfile.Reloader // or nil for plaintext
	// memReceive: a full table could not be streamed to the state dir;
	// full tables are received into memory from then on.
	memReceive atomic.Bool
	// stateFailing: the last state write failed and was logged; the next
	// failures are only counted (a full state dir fails every update)
	// until a write succeeds.
	stateFailing atomic.Bool

	prob *probation // the state dir's last known good (probation.go)

	reportMu sync.Mutex // guards rep
	rep      reporting  // the failing-names report (report.go)

	mu      sync.Mutex // guards following
	version string
	// The last applied table, the base of the next delta and of
	// /debug/nametable, is in the state file when onDisk (then wire is
	// nil), else in wire in its binary proto form, or nowhere (both
	// unset) before the first table or after a rejected one dropped the
	// base (the next delta is then NACKed and the server sends a full
	// table). Decoded, a 100,000-name table took ~40 MB beside the agent's
	// lookup table; marshalled it takes a tenth, on disk nothing.
	wire   []byte
	onDisk bool
	// settings are those of the version applied (nil: none), kept apart
	// from its table: a delta without settings keeps them.
	settings *namewire.AgentSettings
	addr     string // control plane of the open stream, or ""
	synced1  bool
}

// New checks cfg and returns a Client; it does no I/O.
func New(cfg Config) (*Client, error) {
	if len(cfg.Addrs) == 0 {
		return nil, errors.New("discovery: no control plane address")
	}
	if cfg.Apply == nil {
		return nil, errors.New("discovery: Apply is required")
	}
	if (cfg.TLSCert == "") != (cfg.TLSKey == "") {
		return nil, errors.New("discovery: the client certificate and key go together")
	}
	cfg = cfg.withDefaults()
	m, err := newMetrics(cfg.Registry)
	if err != nil {
		return nil, err
	}
	c := &Client{
		cfg:     cfg,
		log:     cfg.Logger,
		metrics: m,
		synced:  make(chan struct{}),
		prob:    &probation{dir: cfg.StateDir, period: cfg.Probation, now: cfg.Now, log: cfg.Logger},
	}
	if cfg.CACert != "" || cfg.TLSCert != "" {
		if c.tls, err = certfile.New(certfile.Config{
			CAFile: cfg.CACert, CertFile: cfg.TLSCert, KeyFile: cfg.TLSKey, ServerName: cfg.ServerName, Logger: cfg.Logger,
		}); err != nil {
			return nil, fmt.Errorf("discovery: %w", err)
		}
	}
	if cfg.TokenFile != "" && c.tls == nil {
		return nil, errors.New("discovery: a token file needs TLS to the control plane (a CA certificate): a token is never sent in plaintext")
	}
	return c, nil
}

// withDefaults returns cfg with the defaults its fields document set.
func (cfg Config) withDefaults() Config {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&cfg.ConnectTimeout, 5*time.Second)
	def(&cfg.MinBackoff, 250*time.Millisecond)
	def(&cfg.MaxBackoff, 30*time.Second)
	def(&cfg.KeepaliveTime, 30*time.Second)
	def(&cfg.KeepaliveTimeout, 10*time.Second)
	if cfg.Probation == 0 {
		cfg.Probation = 30 * time.Second
	}
	if cfg.MaxMessageSize <= 0 {
		cfg.MaxMessageSize = 256 << 20
	}
	if cfg.ReceiveWindow <= 0 {
		cfg.ReceiveWindow = 1 << 20
	}
	if cfg.InstanceID == "" {
		cfg.InstanceID = uuid.NewString()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return cfg
}

// InstanceID returns the UUID that names this agent on the stream.
func (c *Client) InstanceID() string { return c.cfg.InstanceID }

// Synced is closed once the stream delivered a table the agent applied.
func (c *Client) Synced() <-chan struct{} { return c.synced }

// current returns the version and the table last applied, or a nil table
// when there is none (or its base was dropped).
func (c *Client) current() (string, namewire.RawTable) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.onDisk:
		return c.version, namewire.FileTable(filepath.Join(c.cfg.StateDir, stateFile))
	case c.wire != nil:
		return c.version, namewire.MemTable(c.wire)
	}
	return c.version, nil
}

// Addr returns the control plane of the open stream, or "" between streams.
func (c *Client) Addr() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.addr
}

// Restore builds the table persisted in StateDir, read name by name from
// the file (one pass, never whole in memory), so the agent serves its last
// table before any control plane answers. When the previous process died
// within the probation of its version, that is the last known good table,
// and the version is rejected (NACKed when the control plane sends it). It
// returns false with no error when there is nothing to restore. Call it
// before Run.
func (c *Client) Restore() (bool, error) {
	if c.cfg.StateDir == "" {
		return false, nil
	}
	if err := c.prob.start(); err != nil {
		return false, fmt.Errorf("state dir %s: %w", c.cfg.StateDir, err)
	}
	path := filepath.Join(c.cfg.StateDir, stateFile)
	version, shape, err := namewire.FileVersion(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if errors.Is(err, namewire.ErrNoTable) {
		return false, fmt.Errorf("state file %s holds no table", path)
	}
	if err != nil {
		return false, fmt.Errorf("parse state file %s: %w", path, err)
	}
	settings, err := shape.TableSettings()
	if err == nil {
		err = c.supported(settings)
	}
	if err == nil {
		err = c.apply(version, namewire.FileTable(path), shape, settings)
	}
	if err != nil {
		return false, fmt.Errorf("restore table %s: %w", version, err)
	}
	c.setCurrent(version, nil, true, settings)
	c.log.Info("restored name table", "version", version)
	return true, nil
}

// applyNew applies a version from the stream, on probation from before
// Apply runs: a process that dies applying it rejects it at the next start.
func (c *Client) applyNew(version string, t namewire.RawTable, shape *namewire.Shape, settings *namewire.AgentSettings) error {
	if err := c.prob.begin(version, c.stateVersion()); err != nil {
		c.log.Error("put name table on probation; a crash in it will not be caught", "version", version, "err", err)
	}
	crashOnApply(version, t)
	if err := c.apply(version, t, shape, settings); err != nil {
		c.prob.cancel()
		return err
	}
	return nil
}

// stateVersion returns the version in the state file, or "" when the
// table applied is not there.
func (c *Client) stateVersion() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.onDisk {
		return ""
	}
	return c.version
}

// apply hands the table version to Apply; shape is the table's when
// known, or nil.
func (c *Client) apply(version string, t namewire.RawTable, shape *namewire.Shape, settings *namewire.AgentSettings) error {
	return c.cfg.Apply(&Version{id: version, walk: t, shape: shape, settings: settings})
}

// supported fails settings that require a feature the agent does not
// implement: such a version must be NACKed, not applied in part.
func (c *Client) supported(s *namewire.AgentSettings) error {
	if u := s.Unsupported(c.cfg.Features); len(u) > 0 {
		return fmt.Errorf("settings require features this agent does not implement: %s", strings.Join(u, ", "))
	}
	return nil
}

// currentSettings returns the settings of the version applied.
func (c *Client) currentSettings() *namewire.AgentSettings {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.settings
}

// setCurrent records the table applied at version: in wire, or in the
// state file when onDisk, and its settings.
func (c *Client) setCurrent(version string, wire []byte, onDisk bool, settings *namewire.AgentSettings) {
	c.mu.Lock()
	c.version, c.wire, c.onDisk, c.settings = version, wire, onDisk, settings
	c.mu.Unlock()
}

// dropBase forgets an in-memory base before a build, so the old wire form
// is not held beside the new one (and the table being built); the version
// stays.
func (c *Client) dropBase() {
	c.mu.Lock()
	c.wire = nil
	c.mu.Unlock()
}

func (c *Client) markSynced() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.synced1 {
		c.synced1 = true
		close(c.synced)
	}
}

// Run keeps a stream open until ctx ends. Every round tries the addresses
// in order, so the first reachable one wins. Between rounds it waits a
// jittered exponential backoff, so a control plane outage does not become a
// reconnect storm of every agent at once; the backoff starts over after a
// stream that delivered responses and lived at least stableSession, and
// even then the reconnect waits a random part of MinBackoff so the agents
// of a restarted replica do not all land on the next one in the same
// instant. It returns nil when ctx ends.
func (c *Client) Run(ctx context.Context) error {
	err := c.run(ctx)
	// Not deferred: a panic unwinding through Run is a death, whose
	// version the next start must reject, not a clean stop.
	c.prob.stop()
	return err
}

func (c *Client) run(ctx context.Context) error {
	failures := 0
	for {
		stable := false
		for _, addr := range c.cfg.Addrs {
			start := time.Now()
			got, err := c.session(ctx, addr)
			if ctx.Err() != nil {
				return nil
			}
			if got {
				stable = time.Since(start) >= stableSession
				c.log.Warn("control plane stream ended", "addr", addr, "err", err)
				break // start again from the first address
			}
			c.log.Warn("control plane unavailable", "addr", addr, "err", err)
		}
		var d time.Duration
		if stable {
			failures = 0
			d = time.Duration(rand.Int64N(int64(c.cfg.MinBackoff) + 1))
		} else {
			d = backoff(c.cfg.MinBackoff, c.cfg.MaxBackoff, failures)
			failures++
		}
		c.metrics.backoff.Set(d.Seconds())
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// stableSession is how long a stream must have lived for its end to count
// as a disconnect rather than a failure: a control plane that accepts and
// drops streams at once must not be hammered in a tight loop.
const stableSession = 10 * time.Second

// backoff returns min*2^n capped at max, with "equal jitter": half fixed,
// half random, so agents spread out but never retry at once.
func backoff(lo, hi time.Duration, n int) time.Duration {
	d := hi
	if n < 32 {
		if e := lo << n; e > 0 && e < hi {
			d = e
		}
	}
	half := d / 2
	return half + time.Duration(rand.Int64N(int64(half)+1))
}
