// Package safemode is the supervisor's safe mode: when the agent cannot
// stay up, the supervisor answers the pod's queries itself on the DNS
// sockets it holds, forwarding each to the pod's upstream nameservers (no
// table, no cache), or refusing each at once when the pod's last version
// enforced a DNS policy. It links little beyond what the agent already
// does (miekg/dns, net/http, internal/metrics): every pod maps the
// sidecar's binary. See agent/README.md, "Safe mode".
package safemode

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"github.com/meshdns/meshdns/internal/metrics"
)

// Config configures a Server. Every field but Files has a usable zero value.
type Config struct {
	// Files are the DNS sockets the supervisor holds (UDP and TCP, in any
	// order); each episode of safe mode serves duplicates of them.
	Files []*os.File
	// ProbeAddr, when set, is where safe mode serves /healthz/ready,
	// /healthz/live and /metrics while it runs (the agent's --probe-addr,
	// free while no agent runs).
	ProbeAddr string
	// Timeout is how long one upstream try waits (default 2s).
	Timeout time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Registry, or nil, registers the safe mode metrics; /metrics on the
	// probe address serves it.
	Registry *metrics.Registry
}

// Mode is how an episode of safe mode answers, decided when it starts
// (the agent may have applied a new version since the last).
type Mode struct {
	// Upstreams are plain DNS nameservers, host:port, tried in turn;
	// none: every query is refused.
	Upstreams []string
	// Policy decides between forwarding and refusing.
	Policy Policy
}

// Refusing reports whether the mode refuses every query.
func (m Mode) Refusing() bool { return m.Policy.Enforcing || len(m.Upstreams) == 0 }

// Server runs safe mode episodes: Enter starts one, Leave ends it.
type Server struct {
	cfg     Config
	metrics *safeMetrics
	// inflight counts the answers of every episode still being made;
	// Close waits for them.
	inflight sync.WaitGroup

	mu  sync.Mutex // guards following
	on  bool       // in safe mode: from Enter until Recovered
	cur *episode   // or nil: not serving (outside safe mode, or an agent is being tried)
}

// New returns a Server; it serves nothing until Enter.
func New(cfg Config) (*Server, error) {
	if len(cfg.Files) == 0 {
		return nil, errors.New("safe mode: no DNS socket")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 2 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	m, err := newMetrics(cfg.Registry)
	if err != nil {
		return nil, err
	}
	return &Server{cfg: cfg, metrics: m}, nil
}

// On reports whether the pod is in safe mode: from Enter until
// Recovered, across the agent's tries in between.
func (s *Server) On() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.on
}

// Serving reports whether the supervisor is reading the sockets.
func (s *Server) Serving() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur != nil
}

// Enter starts serving the sockets (and the probe address) for reason;
// serving already, it does nothing. The first Enter after Recovered (or
// ever) counts an entry into safe mode; those after an agent's failed try
// resume it. A probe address that cannot be bound is logged: the DNS
// sockets are what matters.
func (s *Server) Enter(reason string, mode Mode) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur != nil {
		return nil
	}
	e, err := s.start(reason, mode)
	if err != nil {
		return fmt.Errorf("enter safe mode: %w", err)
	}
	s.cur = e
	if s.on {
		s.cfg.Logger.Info("safe mode resumed", "reason", reason, "refusing", mode.Refusing())
		return nil
	}
	s.on = true
	s.metrics.enter()
	s.cfg.Logger.Warn("safe mode: the supervisor answers the pod's queries until an agent stays up",
		"reason", reason, "refusing", mode.Refusing(), "upstreams", mode.Upstreams, "policy", mode.Policy.Why)
	return nil
}

// Leave stops reading the sockets and frees the probe address, so that an
// agent started next takes them; answers being made are still sent. The
// pod stays in safe mode until Recovered. Not serving, it does nothing.
func (s *Server) Leave() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur == nil {
		return
	}
	s.cur.stop()
	s.release(s.cur)
	s.cur = nil
}

// Recovered ends safe mode: an agent stayed up. Call it after Leave.
func (s *Server) Recovered() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.on {
		return
	}
	s.on = false
	s.metrics.leave()
	s.cfg.Logger.Warn("safe mode over: the agent stays up")
}

// Close leaves safe mode and waits for the answers being made.
func (s *Server) Close() error {
	s.Leave()
	s.inflight.Wait()
	return nil
}

// episode is one stretch of safe mode: its duplicates of the sockets, its
// probe server, the goroutines reading them.
type episode struct {
	reason  string
	mode    Mode
	udp     []net.PacketConn
	tcp     []net.Listener
	probe   interface{ Close() error } // or nil
	readers sync.WaitGroup
	answers sync.WaitGroup // answers being made
	sem     chan struct{}  // bounds the UDP answers being made
	connSem chan struct{}  // bounds the TCP connections served
	stopped chan struct{}  // closed by stop

	mu    sync.Mutex // guards following
	conns map[net.Conn]struct{}
	done  bool
}

func (s *Server) start(reason string, mode Mode) (*episode, error) {
	e := &episode{reason: reason, mode: mode, conns: map[net.Conn]struct{}{}, sem: make(chan struct{}, maxInflight),
		connSem: make(chan struct{}, maxConns), stopped: make(chan struct{})}
	for _, f := range s.cfg.Files {
		if pc, err := net.FilePacketConn(f); err == nil {
			e.udp = append(e.udp, pc)
			continue
		}
		l, err := net.FileListener(f)
		if err != nil {
			e.closeSockets()
			return nil, fmt.Errorf("socket %s: %w", f.Name(), err)
		}
		e.tcp = append(e.tcp, l)
	}
	if s.cfg.ProbeAddr != "" {
		p, err := s.serveProbe(e)
		if err != nil {
			s.cfg.Logger.Error("safe mode: no probes", "err", err)
		} else {
			e.probe = p
		}
	}
	for _, pc := range e.udp {
		e.readers.Add(1)
		go s.serveUDP(e, pc)
	}
	for _, l := range e.tcp {
		e.readers.Add(1)
		go s.serveTCP(e, l)
	}
	return e, nil
}

// stop ends the episode: reads stop at once (a deadline, so answers being
// made can still be written on the UDP sockets), listeners and the probe
// server close; each socket's duplicate closes once its answers are sent.
func (e *episode) stop() {
	e.mu.Lock()
	e.done = true
	close(e.stopped)
	for c := range e.conns {
		c.SetReadDeadline(time.Now())
	}
	e.mu.Unlock()
	for _, pc := range e.udp {
		pc.SetReadDeadline(time.Now())
	}
	for _, l := range e.tcp {
		l.Close()
	}
	if e.probe != nil {
		e.probe.Close()
	}
	e.readers.Wait()
}

// release closes the episode's duplicates once its answers are sent.
func (s *Server) release(e *episode) {
	s.inflight.Add(1)
	go func() {
		defer s.inflight.Done()
		e.answers.Wait()
		e.closeSockets()
	}()
}

func (e *episode) closeSockets() {
	for _, pc := range e.udp {
		pc.Close()
	}
	for _, l := range e.tcp {
		l.Close()
	}
}
