package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/meshdns/meshdns/controlplane/view"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// agent is the state of one stream.
type agent struct {
	pod, namespace, clusterDomain, instanceID, agentVersion, peer string
	connected                                                     time.Time
	sub                                                           *view.Sub

	wake chan struct{} // the receiver asks the sender for a full table
	// admitted frees the stream's admission slot once the agent answered
	// its first response; idempotent.
	admitted func()

	mu        sync.Mutex          // guards following
	nonce     uint64              // last nonce sent
	sentID    string              // version the agent holds once it applies what was sent
	sentSeq   uint64              // model sequence of the newest version sent
	inflight  map[uint64]inflight // sent, not yet answered, by nonce
	lastFull  uint64              // nonce of the last full table sent
	needFull  bool
	acked     string
	ackedAt   time.Time
	nacks     int
	lastNack  string
	overflows int
}

// maxInflight bounds the responses remembered per agent while unanswered.
const maxInflight = 64

type inflight struct {
	version *view.Version
	kind    string
	sentAt  time.Time
}

func (a *agent) info() AgentInfo {
	a.mu.Lock()
	defer a.mu.Unlock()
	i := AgentInfo{
		Pod: a.pod, Namespace: a.namespace, ClusterDomain: a.clusterDomain, InstanceID: a.instanceID,
		AgentVersion: a.agentVersion, Peer: a.peer, Connected: a.connected,
		Acked: a.acked, AckedAt: a.ackedAt, Nacks: a.nacks, LastNack: a.lastNack, Overflows: a.overflows,
		View: a.sub.View().Current().ID,
	}
	i.Sent = a.sentID
	return i
}

// StreamNameTable implements meshdnsv1.NameDiscoveryServiceServer.
func (s *Server) StreamNameTable(st grpc.BidiStreamingServer[meshdnsv1.StreamNameTableRequest, meshdnsv1.StreamNameTableResponse]) error {
	ctx, cancel := context.WithCancel(st.Context())
	defer cancel()
	first, err := st.Recv()
	if err != nil {
		s.m.streams.WithLabelValues("error").Inc()
		return err
	}
	id := first.GetIdentity()
	// Who the agent is comes from its credential (identity.go).
	ver, err := s.authorize(ctx, id)
	if err != nil {
		s.m.streams.WithLabelValues("invalid").Inc()
		return err
	}
	defer ver.release()
	// Hold the agent until the first model exists: an empty table would
	// replace the one it restored from disk.
	select {
	case <-s.cfg.Views.Ready():
	case <-ctx.Done():
		return ctx.Err()
	}
	release, err := s.admit.acquire(ctx)
	if err != nil {
		return err
	}
	defer release()
	sub := s.cfg.Views.Subscribe(ver.viewKey(), s.cfg.QueueSize)
	defer sub.Close()
	a := &agent{
		pod: ver.pod, namespace: ver.namespace, clusterDomain: id.GetClusterDomain(),
		instanceID: id.GetInstanceId(), agentVersion: id.GetAgentVersion(),
		connected: s.cfg.Now(), sub: sub, wake: make(chan struct{}, 1), admitted: release,
		inflight: map[uint64]inflight{},
	}
	if p, ok := peer.FromContext(ctx); ok {
		a.peer = p.Addr.String()
	}
	log := s.log.With("pod", a.namespace+"/"+a.pod, "instance", a.instanceID)
	s.add(a)
	defer s.remove(a)
	log.Info("agent connected", "peer", a.peer, "version", first.GetVersionInfo())

	recvErr := make(chan error, 1)
	go func() {
		recvErr <- s.receive(st, a, log)
		cancel()
	}()
	err = s.send(ctx, st, a, first.GetVersionInfo())
	cancel()
	if err == errRebind {
		// The server ends this stream: the receiver ends when the
		// handler returns, not before.
		log.Info("agent told to reconnect: its namespace has a view of its own now")
		return err
	}
	rerr := <-recvErr
	if err == nil || errors.Is(err, context.Canceled) {
		err = rerr
	}
	switch {
	case err == nil || errors.Is(err, io.EOF) || errors.Is(err, context.Canceled) || status.Code(err) == codes.Canceled:
		log.Info("agent disconnected")
		s.m.streams.WithLabelValues("ok").Inc()
		return nil
	default:
		log.Info("agent stream ended", "err", err)
		s.m.streams.WithLabelValues("error").Inc()
		return err
	}
}

// send writes responses until ctx ends: first what brings the agent from
// resume to the current version, then each queued version.
func (s *Server) send(ctx context.Context, st grpc.ServerStream, a *agent, resume string) error {
	v := a.sub.View()
	cur := v.Current()
	if err := s.write(st, a, v.Response(resume, cur)); err != nil {
		return err
	}
	for {
		var target *view.Version
		select {
		case <-ctx.Done():
			return ctx.Err()
		case target = <-a.sub.C():
		case <-a.wake:
		}
		if a.sub.Rebind() {
			// The namespace got a view of its own (view.Shared): the agent
			// reconnects at once and resumes with a delta.
			return errRebind
		}
		overflow := a.sub.Overflowed()
		a.mu.Lock()
		full := a.needFull || overflow
		a.needFull = false
		if overflow {
			a.overflows++
		}
		if full {
			// Claim the full table's nonce now (only this goroutine
			// sends), so a NACK of an older response arriving before
			// the write sees that a repair is on its way.
			a.lastFull = a.nonce + 1
		}
		sentID, sentSeq := a.sentID, a.sentSeq
		a.mu.Unlock()
		var p *view.Prepared
		switch {
		case full:
			// Coalesce: whatever was queued is older than the current
			// version, which the full table carries.
			drain(a.sub.C())
			p = v.Current().Full()
		case target == nil || target.Seq <= sentSeq:
			continue // stale: a newer table already went out
		default:
			p = v.Response(sentID, target)
		}
		if err := s.write(st, a, p); err != nil {
			return err
		}
	}
}

func drain(c <-chan *view.Version) {
	for {
		select {
		case <-c:
		default:
			return
		}
	}
}

func (s *Server) write(st grpc.ServerStream, a *agent, p *view.Prepared) error {
	a.mu.Lock()
	a.nonce++
	n := a.nonce
	a.inflight[n] = inflight{version: p.Version, kind: p.Kind, sentAt: s.cfg.Now()}
	// An agent that reads but never answers must not grow the map
	// without bound; answers that old only lose their latency sample.
	delete(a.inflight, n-maxInflight)
	if p.Kind == "full" {
		a.lastFull = n
	}
	a.sentID, a.sentSeq = p.Version.ID, p.Version.Seq
	a.mu.Unlock()
	if err := st.SendMsg(&encoded{p: p, nonce: strconv.FormatUint(n, 10)}); err != nil {
		return err
	}
	count, bytes := s.m.push(p.Kind)
	count.Inc()
	bytes.Add(float64(len(p.Bytes)))
	return nil
}

// receive handles ACKs and NACKs until the stream ends.
func (s *Server) receive(st grpc.ServerStream, a *agent, log *slog.Logger) error {
	for {
		req := new(meshdnsv1.StreamNameTableRequest)
		if err := st.RecvMsg(req); err != nil {
			return err
		}
		a.admitted()
		n, err := strconv.ParseUint(req.GetResponseNonce(), 10, 64)
		if err != nil {
			log.Warn("ignoring request with a bad nonce", "nonce", req.GetResponseNonce())
			continue
		}
		now := s.cfg.Now()
		a.mu.Lock()
		f, known := a.inflight[n]
		if req.GetErrorDetail() == nil {
			for k := range a.inflight {
				if k <= n {
					delete(a.inflight, k)
				}
			}
			a.acked, a.ackedAt = req.GetVersionInfo(), now
			a.mu.Unlock()
			if known {
				s.observeAck(f, a.connected, now)
			}
			continue
		}
		delete(a.inflight, n)
		a.nacks++
		a.lastNack = req.GetErrorDetail().GetMessage()
		a.acked = req.GetVersionInfo()
		// A NACKed delta means the agent's table is not what we think:
		// send a full table, unless one went out after the NACKed
		// response (it already repairs the agent; pipelined deltas
		// NACKed after it must not trigger a full table each). A NACKed
		// full table is not resent: the agent would reject it again; it
		// keeps its last good table until the next version.
		resend := (!known || f.kind != "full") && a.lastFull < n
		if resend {
			a.needFull = true
		} else if known && f.kind == "full" && n == a.nonce {
			// The agent kept its table: base the next delta on it
			// (a full table again if it is not in the history).
			a.sentID = req.GetVersionInfo()
		}
		a.mu.Unlock()
		s.m.nacks.Inc()
		log.Warn("agent rejected table", "nonce", n, "kind", f.kind, "code", req.GetErrorDetail().GetCode(),
			"err", req.GetErrorDetail().GetMessage(), "kept", req.GetVersionInfo(), "resend_full", resend)
		if resend {
			select {
			case a.wake <- struct{}{}:
			default:
			}
		}
	}
}

// observeAck records the latencies of an applied response.
func (s *Server) observeAck(f inflight, connected, now time.Time) {
	v := f.version
	start := v.Published
	if connected.After(start) {
		start = connected
	}
	s.m.pushLatency.Observe(now.Sub(start).Seconds())
	if !v.Changed.IsZero() && v.Changed.After(connected) {
		s.m.programming.Observe(now.Sub(v.Changed).Seconds())
	}
}
