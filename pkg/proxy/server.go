package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
)

// Server serves a Handler over UDP and TCP on the configured addresses.
type Server struct {
	cfg Config
	h   *Handler
	log *slog.Logger

	mu sync.Mutex
	// guarded by mu
	udp    []*net.UDPConn
	tcp    []*net.TCPListener
	closed bool
	stop   context.CancelFunc // ends Run; or nil

	// forwarding state of the UDP readers (udp.go)
	jobs     chan *fwdJob
	jobPool  sync.Pool
	forwards atomic.Int64 // forwarding workers running
	// tcpConns holds the open client TCP connections (tcpconns.go).
	tcpConns *tcpTable
	// Drain state (drain.go): draining is set once Drain started;
	// readers counts UDP reader goroutines, pending forwarded UDP
	// queries not answered yet.
	draining atomic.Bool
	readers  atomic.Int64
	pending  atomic.Int64
}

// New returns a Server that has not opened any socket yet; Run (or Listen)
// does.
func New(cfg Config) (*Server, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	h, err := NewHandler(cfg)
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, h: h, log: cfg.Logger, jobs: make(chan *fwdJob),
		tcpConns: newTCPTable(cfg.MaxTCPConns, cfg.MaxTCPConnsPerClient)}
	s.jobPool.New = func() any { return new(fwdJob) }
	return s, nil
}

// Handler returns the Handler the server answers with.
func (s *Server) Handler() *Handler { return s.h }

// SetTable swaps the table answers come from; see Handler.SetTable.
func (s *Server) SetTable(t Lookuper) { s.h.SetTable(t) }

// SetQueryLog switches the query log; see Handler.SetQueryLog.
func (s *Server) SetQueryLog(cfg QueryLogConfig) { s.h.SetQueryLog(cfg) }

// QueryLog returns the query log's configuration.
func (s *Server) QueryLog() QueryLogConfig { return s.h.QueryLog() }

// Ready reports whether a table is set.
func (s *Server) Ready() bool { return s.h.Ready() }

// Listen opens the sockets so a caller learns about a taken port before
// Run, and tests can read the bound addresses. It is idempotent.
func (s *Server) Listen() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return net.ErrClosed
	}
	if len(s.udp) > 0 {
		return nil
	}
	if in := s.cfg.Inherited; in != nil {
		s.udp = append(s.udp, in.UDP...)
		s.tcp = append(s.tcp, in.TCP...)
	} else {
		for _, addr := range s.cfg.Addrs {
			udp, tcp, err := listenAddr(addr, s.cfg.UDPSockets, s.cfg.Takeover)
			if err != nil {
				s.closeLocked()
				return err
			}
			s.udp = append(s.udp, udp...)
			s.tcp = append(s.tcp, tcp)
		}
	}
	for _, c := range s.udp {
		s.h.obs.WatchUDP(c)
	}
	return nil
}

// UDPAddrs returns the bound UDP addresses (one per configured address).
func (s *Server) UDPAddrs() []net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []net.Addr
	seen := map[string]bool{}
	for _, c := range s.udp {
		a := c.LocalAddr()
		if !seen[a.String()] {
			seen[a.String()] = true
			out = append(out, a)
		}
	}
	return out
}

// TCPAddrs returns the bound TCP addresses.
func (s *Server) TCPAddrs() []net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]net.Addr, 0, len(s.tcp))
	for _, l := range s.tcp {
		out = append(out, l.Addr())
	}
	return out
}

// Run listens (unless Listen already did) and serves until ctx ends or
// Close is called; it returns nil then, or the error that stopped it.
func (s *Server) Run(ctx context.Context) error {
	if err := s.Listen(); err != nil {
		return err
	}
	// Serving goes on past ctx while a drain finishes the queries taken.
	outer := ctx
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	s.mu.Lock()
	udp, tcp := s.udp, s.tcp
	s.stop = cancel
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil
	}

	var wg sync.WaitGroup
	for _, c := range udp {
		wg.Go(func() { s.serveUDP(ctx, &wg, c) })
	}
	for _, l := range tcp {
		wg.Go(func() { s.serveTCP(ctx, &wg, l) })
	}
	// Closing the sockets is what unblocks the readers.
	stop := context.AfterFunc(ctx, func() { _ = s.Close() })
	defer stop()
	select {
	case <-outer.Done():
		if s.cfg.DrainTimeout > 0 {
			dctx, dcancel := context.WithTimeout(context.Background(), s.cfg.DrainTimeout)
			if err := s.Drain(dctx); err != nil {
				s.log.Warn("drain cut short; closing with queries unanswered", "err", err)
			}
			dcancel()
		}
		cancel()
	case <-ctx.Done(): // Close
	}
	wg.Wait()
	return nil
}

// Close closes every socket; Run returns soon after. It is idempotent.
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.stop != nil {
		s.stop()
	}
	return s.closeLocked()
}

func (s *Server) closeLocked() error {
	var errs []error
	for _, c := range s.udp {
		s.h.obs.ForgetUDP(c)
		if err := c.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			errs = append(errs, err)
		}
	}
	for _, l := range s.tcp {
		if err := l.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("close listeners: %w", errors.Join(errs...))
	}
	return nil
}

// SetTablePolicy swaps the table and the policy; see
// Handler.SetTablePolicy.
func (s *Server) SetTablePolicy(t Lookuper, p *Policy) { s.h.SetTablePolicy(t, p) }

// SetFailingNames counts failing answers in f; see
// Handler.SetFailingNames.
func (s *Server) SetFailingNames(f *FailingNames) { s.h.SetFailingNames(f) }
