// Package server is the control plane's gRPC NameDiscoveryService: one
// stream per agent, fed from the agent's view (package view).
//
// A stream speaks for what its credential proves (package auth), never
// for what the agent claims: a pod-bound token proves its pod, and the
// stream is filed and bounded as that pod's; a SPIFFE certificate proves
// only a namespace and service account, so the stream is filed as pod
// "sa:<serviceaccount>", the claimed pod is kept for debugging only, and
// all the streams of one SPIFFE ID share one set of limits
// (Config.MaxPodsPerSPIFFEID pods' worth). A stream lasts no longer than
// its credential (it ends when the credential expires) nor than the pod
// its token is bound to (Config.Pods): it ends with Unauthenticated, and
// the agent reconnects with the credential it holds then.
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	"github.com/meshdns/meshdns/controlplane/agentsettings"
	"github.com/meshdns/meshdns/controlplane/agentstream"
	"github.com/meshdns/meshdns/controlplane/auth"
	"github.com/meshdns/meshdns/controlplane/internal/deps"
	"github.com/meshdns/meshdns/controlplane/registry"
	"github.com/meshdns/meshdns/controlplane/view"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// Config configures a Server.
type Config struct {
	// Views supplies the tables; required.
	Views *view.Store
	// TLS, when set, serves gRPC over TLS (set ClientAuth and ClientCAs or
	// GetConfigForClient for mTLS); nil serves plaintext.
	TLS *tls.Config
	// KeepaliveTime is how often the server pings an idle connection;
	// zero means 30s. KeepaliveTimeout is how long it waits for the
	// answer before closing; zero means 10s.
	KeepaliveTime, KeepaliveTimeout time.Duration
	// KeepaliveMinTime is the shortest client ping interval tolerated
	// (enforcement policy); zero means 10s. Agents must ping less often.
	KeepaliveMinTime time.Duration
	// MaxAdmissions bounds the streams between their first request and
	// the agent's first ACK or NACK; more wait (a reconnect storm is
	// served in turns, so memory and CPU stay bounded). Zero means 128.
	MaxAdmissions int
	// Authenticator verifies each stream's credential (package auth); the
	// namespace and pod come from the identity it returns, and a claim that
	// differs is refused. Nil means auth.Insecure(): claims are taken as
	// they are (the binary never leaves it nil without
	// --insecure-allow-unauthenticated).
	Authenticator auth.Authenticator
	// ClusterDomain is the control plane's cluster domain; zero means
	// "cluster.local". Agents of other domains count against
	// MaxClusterDomains.
	ClusterDomain string
	// MaxStreamsPerIdentity bounds the streams one identity holds open at
	// once; zero means 4 (a pod has one, two while it fails over).
	MaxStreamsPerIdentity int
	// ReconnectBurst and ReconnectRate bound how often one identity opens
	// streams: a bucket of ReconnectBurst (zero means 10) refilled at
	// ReconnectRate per second (zero means 0.2, one every 5s).
	ReconnectBurst int
	ReconnectRate  float64
	// MaxPodsPerSPIFFEID is how many pods one SPIFFE ID may stand for. A
	// SPIFFE certificate proves a service account, not a pod, so all the
	// streams of one ID share one set of limits, this many times a pod's
	// (MaxStreamsPerIdentity, ReconnectBurst, ReconnectRate): the pod
	// names its agents claim do not open more. Zero means 256.
	MaxPodsPerSPIFFEID int
	// MaxClusterDomains bounds the cluster domains other than
	// ClusterDomain served at once, each a further view of every
	// namespace; zero means 4.
	MaxClusterDomains int
	// MaxPendingPerPeer bounds the streams of one peer IP address being
	// authenticated at once; more are refused (ResourceExhausted) before
	// their credential is looked at. Zero means 8.
	MaxPendingPerPeer int
	// FailedAuthBurst and FailedAuthRate bound the failed authentications
	// (a credential refused or missing) of one peer IP address: a bucket
	// of FailedAuthBurst (zero means 20) refilled at FailedAuthRate per
	// second (zero means 1). An empty bucket refuses the address's new
	// streams before a handler runs.
	FailedAuthBurst int
	FailedAuthRate  float64
	// MaxConnections bounds the connections open at once (zero means
	// 50,000) and MaxConnectionsPerPeer those of one IP address (zero
	// means 256: pods have one each; raise it where many agents share an
	// address, VMs behind NAT). More are closed as soon as accepted.
	MaxConnections, MaxConnectionsPerPeer int
	// MaxStreamsPerConnection is HTTP/2's MAX_CONCURRENT_STREAMS; zero
	// means 8 (an agent opens one stream on its connection).
	MaxStreamsPerConnection uint32
	// HandshakeTimeout bounds a connection's TLS handshake; zero means
	// 10s.
	HandshakeTimeout time.Duration
	// MaxRequestBytes bounds one message from an agent (agents send only
	// their identity, ACKs and NACKs); zero means 64 KiB.
	MaxRequestBytes int
	// Pods, when set, tells the server of deleted pods: the stream of an
	// agent whose token is bound to a pod ends (Unauthenticated) when
	// that pod is deleted or replaced by another of the same name, and
	// a token of a pod seen deleted in the last 2 minutes opens none
	// (later the API server refuses it). Nil ends streams only when their
	// credential expires.
	Pods Pods
	// Settings composes each agent's settings (package agentsettings);
	// nil means none (every agent's settings are empty). The server runs
	// it (Settings.Run) while it serves, so give each server its own.
	Settings *agentsettings.Settings
	// QuarantineMinAgents and QuarantineFraction set how many agents of a
	// view must report crashing on its current table (quarantine.go) for
	// it to be quarantined: the larger of QuarantineMinAgents (zero means
	// 3) and QuarantineFraction of the view's connected agents (zero
	// means 0.01), counted by this replica.
	QuarantineMinAgents int
	QuarantineFraction  float64
	// CanaryTimeout is how long a canary of a view's new version whose
	// stream ended before it ACKed what it was sent holds the version
	// back from the view's other agents, waiting for the pod to reconnect
	// and report a crash (rollout.go); then another agent takes its
	// place. Zero means 30s.
	CanaryTimeout time.Duration
	// GRPCAgentStream serves the agents' stream on grpc-go, as every
	// other method, instead of agentstream's own HTTP/2 server: an escape
	// hatch should agentstream misbehave, at grpc-go's cost per agent
	// (four goroutines, ~40 KiB and ~40 µs per update; controlplane's
	// README, "Scale").
	GRPCAgentStream bool
	// Logger; nil discards.
	Logger *slog.Logger
	// Registerer for the metrics; nil registers nowhere.
	Registerer prometheus.Registerer
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Server serves NameDiscoveryService.
type Server struct {
	meshdnsv1.UnimplementedNameDiscoveryServiceServer

	cfg   Config
	log   *slog.Logger
	m     *metrics
	grpc  *grpc.Server
	lean  *agentstream.Server // serves the agents' streams, grpc-go gets the rest; nil with GRPCAgentStream
	admit *admission
	fan   *fanout

	auth     auth.Authenticator
	settings *agentsettings.Settings
	limits   *limits
	peers    *peers    // before authentication
	refusals *logLimit // of "agent stream refused" lines

	quar *quarantine // tables agents reported crashing on
	roll *rollout    // new versions to canaries first

	gone *podsGone // streams by the pod their token is bound to; nil without Config.Pods

	mu     sync.Mutex // guards agents
	agents map[*agent]struct{}
}

// New returns a server; Serve or Run starts it.
func New(cfg Config) (*Server, error) {
	if cfg.Views == nil {
		return nil, errors.New("server: Views is required")
	}
	positiveOr(&cfg.MaxAdmissions, 128)
	positiveOr(&cfg.KeepaliveTime, 30*time.Second)
	positiveOr(&cfg.KeepaliveTimeout, 10*time.Second)
	positiveOr(&cfg.KeepaliveMinTime, 10*time.Second)
	if cfg.Authenticator == nil {
		cfg.Authenticator = auth.Insecure()
	}
	if cfg.ClusterDomain == "" {
		cfg.ClusterDomain = "cluster.local"
	}
	positiveOr(&cfg.MaxStreamsPerIdentity, 4)
	positiveOr(&cfg.ReconnectBurst, 10)
	positiveOr(&cfg.ReconnectRate, 0.2)
	positiveOr(&cfg.MaxPodsPerSPIFFEID, 256)
	positiveOr(&cfg.MaxClusterDomains, 4)
	positiveOr(&cfg.MaxPendingPerPeer, 8)
	positiveOr(&cfg.FailedAuthBurst, 20)
	positiveOr(&cfg.FailedAuthRate, 1)
	positiveOr(&cfg.MaxConnections, 50_000)
	positiveOr(&cfg.MaxConnectionsPerPeer, 256)
	positiveOr(&cfg.MaxStreamsPerConnection, 8)
	positiveOr(&cfg.HandshakeTimeout, 10*time.Second)
	positiveOr(&cfg.MaxRequestBytes, 64<<10)
	positiveOr(&cfg.QuarantineMinAgents, 3)
	positiveOr(&cfg.QuarantineFraction, 0.01)
	positiveOr(&cfg.CanaryTimeout, 30*time.Second)
	if cfg.Settings == nil {
		cfg.Settings = agentsettings.Compose()
	}
	cfg.Now = deps.Now(cfg.Now)
	log := deps.Logger(cfg.Logger)
	reg := deps.Registerer(cfg.Registerer)
	quar := newQuarantine(cfg.QuarantineMinAgents, cfg.QuarantineFraction)
	roll := newRollout(quar.threshold, cfg.CanaryTimeout)
	m, err := newMetrics(reg, quar, roll)
	if err != nil {
		return nil, fmt.Errorf("server metrics: %w", err)
	}
	s := &Server{cfg: cfg, log: log, m: m, quar: quar, roll: roll, admit: newAdmission(cfg.MaxAdmissions, m), fan: newFanout(), agents: map[*agent]struct{}{},
		auth:     cfg.Authenticator,
		settings: cfg.Settings,
		refusals: newLogLimit(refusalLogBurst, refusalLogWindow, cfg.Now),
		peers:    newPeers(cfg.MaxPendingPerPeer, float64(cfg.FailedAuthBurst), cfg.FailedAuthRate),
		limits: newLimits(cfg.MaxStreamsPerIdentity, cfg.ReconnectBurst, cfg.ReconnectRate,
			cfg.MaxClusterDomains, registry.CanonicalHost(cfg.ClusterDomain))}
	s.fan.yield = cfg.GRPCAgentStream
	roll.expired, roll.timeouts, roll.quarantined = s.wakeGate, m.canaryTimeouts.Inc, quar.isQuarantined
	quar.gone = func(v *view.View) bool { return roll.connected(v) == 0 && s.viewDropped(v) }
	if cfg.Pods != nil {
		s.gone = newPodsGone(cfg.Now)
		cfg.Pods.OnDelete(s.podDeleted)
	}
	opts := []grpc.ServerOption{
		grpc.ForceServerCodecV2(newCodec()),
		// Server pings detect dead agents (a node gone without a FIN);
		// the enforcement policy lets agents ping us to detect a dead
		// control plane without being cut off as abusive.
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: cfg.KeepaliveTime, Timeout: cfg.KeepaliveTimeout}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: cfg.KeepaliveMinTime, PermitWithoutStream: true}),
		// Thousands of mostly idle connections: return each connection's
		// write buffer to a pool after a flush instead of keeping one per
		// agent; 16KB (one HTTP/2 frame) rather than 32KB, since a pool
		// miss, frequent when 10,000 connections flush at once, allocates
		// and clears a whole buffer for a 100-byte delta. Read with small
		// buffers (agents send only ACKs).
		grpc.SharedWriteBuffer(true),
		grpc.WriteBufferSize(16 << 10),
		grpc.ReadBufferSize(4 << 10),
		// Static flow-control windows: with the default dynamic window
		// every ACK that arrives after a quiet spell makes the server
		// send a BDP ping and read its answer, two more syscalls per
		// agent per update for nothing (agents send only small ACKs).
		grpc.StaticStreamWindowSize(64 << 10),
		grpc.StaticConnWindowSize(64 << 10),
		grpc.MaxRecvMsgSize(cfg.MaxRequestBytes),
		// Bounds for clients that have not authenticated: streams per
		// connection, the handshake's duration, and (tap) new streams of
		// an address that keeps failing authentication, refused before
		// a goroutine starts for them. Connections: Serve's listener.
		grpc.MaxConcurrentStreams(cfg.MaxStreamsPerConnection),
		grpc.ConnectionTimeout(cfg.HandshakeTimeout),
	}
	if err := s.newTransports(cfg, opts, log); err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	return s, nil
}

// newTransports makes grpc-go's server with opts and, unless
// cfg.GRPCAgentStream, agentstream's in front of it.
func (s *Server) newTransports(cfg Config, opts []grpc.ServerOption, log *slog.Logger) error {
	opts = append(opts, grpc.InTapHandle(s.tap))
	if cfg.GRPCAgentStream {
		if cfg.TLS != nil {
			opts = append(opts, grpc.Creds(credentials.NewTLS(cfg.TLS)))
		}
		s.grpc = grpc.NewServer(opts...)
		meshdnsv1.RegisterNameDiscoveryServiceServer(s.grpc, s)
		return nil
	}
	if cfg.TLS != nil {
		// agentstream did the handshake of the connections it hands
		// to grpc-go.
		opts = append(opts, grpc.Creds(agentstream.Creds()))
	}
	s.grpc = grpc.NewServer(opts...)
	meshdnsv1.RegisterNameDiscoveryServiceServer(s.grpc, s)
	var err error
	s.lean, err = agentstream.New(agentstream.Config{
		Method:  meshdnsv1.NameDiscoveryService_StreamNameTable_FullMethodName,
		Handler: leanHandler{s: s}, TLS: cfg.TLS, HandshakeTimeout: cfg.HandshakeTimeout,
		KeepaliveTime: cfg.KeepaliveTime, KeepaliveTimeout: cfg.KeepaliveTimeout, KeepaliveMinTime: cfg.KeepaliveMinTime,
		MaxRecvMsgSize: cfg.MaxRequestBytes, MaxConcurrentStreams: cfg.MaxStreamsPerConnection,
		Admit: s.admitPeer, Logger: log,
	})
	return err
}

// Run listens on addr and serves until ctx ends.
func (s *Server) Run(ctx context.Context, addr string) error {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", addr, err)
	}
	return s.Serve(ctx, lis)
}

// Serve serves on lis until ctx ends, then closes every stream.
func (s *Server) Serve(ctx context.Context, lis net.Listener) error {
	fanCtx, stopFan := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); s.fan.run(fanCtx, s.send) }()
	go func() { defer wg.Done(); _ = s.settings.Run(fanCtx) }()
	changed := s.settings.Changed()
	go func() { defer wg.Done(); s.watchSettings(fanCtx, changed) }()
	defer func() { stopFan(); wg.Wait() }()
	errc, leanc := make(chan error, 1), make(chan error, 1)
	lis = newLimitListener(lis, s.cfg.MaxConnections, s.cfg.MaxConnectionsPerPeer, s.m.connsRefused)
	if s.lean == nil {
		go func() { errc <- s.grpc.Serve(lis) }()
	} else {
		// agentstream accepts every connection and serves the agents'
		// streams; the connections of other methods go on to grpc-go.
		go func() { errc <- s.grpc.Serve(s.lean.Fallback()) }()
		go func() { leanc <- s.lean.Serve(lis) }()
	}
	var err error
	select {
	case err = <-errc:
		err = fmt.Errorf("serve grpc: %w", err)
	case err = <-leanc:
		err = fmt.Errorf("serve agent streams: %w", err)
	case <-ctx.Done():
	}
	// Streams never end on their own, so a graceful stop would wait
	// forever; agents get GOAWAY, reconnect (to another replica) and
	// resume anyway.
	s.grpc.Stop()
	if s.lean != nil {
		s.lean.Close()
	}
	lis.Close()
	if ctx.Err() == nil {
		return err
	}
	return nil
}

// positiveOr sets *v to def when it is not positive: Config's zero values
// (and nonsense negative ones) take the default its field documents.
func positiveOr[T ~int | ~uint32 | ~int64 | ~float64](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}
