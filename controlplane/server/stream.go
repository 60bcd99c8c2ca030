package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/meshdns/meshdns/controlplane/agentsettings"
	"github.com/meshdns/meshdns/controlplane/auth"
	"github.com/meshdns/meshdns/controlplane/view"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// A stream has one goroutine of ours, its handler, which reads the agent's
// ACKs and NACKs. Responses are sent by whoever finds the agent behind:
// the handler for the first one, the fan-out workers (fanout.go) for new
// versions, the handler again when an answer releases a held agent. The
// scheduled flag makes sure only one of them sends at a time.

// agent is the state of one stream.
type agent struct {
	pod, namespace, clusterDomain, instanceID, agentVersion, peer string
	claimedPod                                                    string // when the credential proves no pod
	connected                                                     time.Time
	sub                                                           *view.Sub
	out                                                           agentOut
	// admitted frees the stream's admission slot once the agent answered
	// its first response; idempotent.
	admitted func()
	// id and features are what the agent's settings are composed for.
	id       auth.Identity
	features []string

	composeMu sync.Mutex // held while composing settings (settings.go)

	mu        sync.Mutex // guards following
	scheduled bool       // queued for, or being handled by, a sender; only it sends
	held      bool       // not sending until the agent answers (canSendLocked)
	ended     bool       // the handler returned or is returning: send nothing
	stopped   error      // why the stream must end (its pod is gone, its credential expired), or nil
	sending   bool       // a sender is between its decision and SendMsg's return
	idle      chan struct{}
	nonce     uint64              // last nonce sent
	answered  uint64              // last nonce ACKed or NACKed
	sentBytes uint64              // bytes of all responses sent
	ansBytes  uint64              // bytes of the responses up to answered
	ring      [ringSize]inflight  // the responses after answered, by nonce % ringSize
	sentID    string              // view version the agent holds once it applies what was sent
	settings  agentsettings.Agent // the agent's current settings
	// sentSettings is the settings version the agent holds once it
	// applies what was sent; refusedSettings (when refused) those of the
	// last full table it NACKed, not sent again unless the table moves on.
	sentSettings, refusedSettings string
	refused                       bool
	lastFull                      uint64 // nonce of the last full table sent
	needFull                      bool
	acked                         string
	ackedAt                       time.Time
	nacks                         int
	lastNack                      string
	holds                         int
	failing                       *FailingReport // the agent's last report (failing.go), or nil
	rejected                      string         // the table the agent reported crashing on (quarantine.go), or ""
	// gate is its view's staged rollout (rollout.go), set before the
	// first send and never changed.
	gate *gate
}

const (
	// ringSize bounds the responses an agent may leave unanswered; more
	// versions wait and go out as one response when it answers.
	ringSize = 8
	// maxUnanswered bounds the bytes of responses an agent may leave
	// unanswered. gRPC blocks a send only when the stream already has
	// 64 KiB waiting for its writer, and what is waiting was not yet
	// answered, so below this bound a send never blocks its sender.
	maxUnanswered = 32 << 10
)

type inflight struct {
	nonce    uint64
	version  *view.Version
	full     bool
	settings string // version of the settings the response carried
	bytes    uint64 // sentBytes once this response was sent
}

func (a *agent) info() AgentInfo {
	a.mu.Lock()
	defer a.mu.Unlock()
	return AgentInfo{
		Pod: a.pod, ClaimedPod: a.claimedPod, Namespace: a.namespace, ClusterDomain: a.clusterDomain, InstanceID: a.instanceID,
		AgentVersion: a.agentVersion, Peer: a.peer, Connected: a.connected, Sent: joinVersion(a.sentID, a.sentSettings),
		Acked: a.acked, AckedAt: a.ackedAt, Nacks: a.nacks, LastNack: a.lastNack, Holds: a.holds,
		Failing: a.failingLocked(), View: joinVersion(a.sub.View().Current().ID, a.settings.Version),
		Settings: settingsInfo(a.settings), Rejected: a.rejected,
	}
}

func (a *agent) logger(log *slog.Logger) *slog.Logger {
	return log.With("pod", a.namespace+"/"+a.pod, "instance", a.instanceID)
}

// canSendLocked reports whether a response may go out now: the agent has
// answered enough of what it was sent.
func (a *agent) canSendLocked() bool {
	return a.nonce-a.answered < ringSize && a.sentBytes-a.ansBytes < maxUnanswered
}

// StreamNameTable implements meshdnsv1.NameDiscoveryServiceServer: the
// stream served by grpc-go (agentstream serves the agents' own).
func (s *Server) StreamNameTable(st grpc.BidiStreamingServer[meshdnsv1.StreamNameTableRequest, meshdnsv1.StreamNameTableResponse]) error {
	ctx := st.Context()
	first, err := st.Recv()
	if err != nil {
		s.m.streams.WithLabelValues("error").Inc()
		return err
	}
	a, done, err := s.open(ctx, first, grpcOut{st: st, ts: grpc.ServerTransportStreamFromContext(ctx)})
	if err != nil {
		return err
	}
	s.sendFirst(a)
	err = s.receive(st, a)
	return s.close(a, done, err)
}

// open admits the stream whose first request is first and files its
// agent; done undoes what open did, once the stream ended (close). The
// caller sends the first response (sendFirst) and then hands the agent's
// answers to answer.
func (s *Server) open(ctx context.Context, first *meshdnsv1.StreamNameTableRequest, out agentOut) (a *agent, done func(), err error) {
	var undo []func()
	undoAll := func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
	defer func() {
		if err != nil {
			undoAll()
		}
	}()
	id := first.GetIdentity()
	// Who the agent is comes from its credential (identity.go).
	ver, err := s.authorize(ctx, id)
	if err != nil {
		s.m.streams.WithLabelValues("invalid").Inc()
		return nil, nil, err
	}
	undo = append(undo, ver.release)
	// Hold the agent until the first model exists: an empty table would
	// replace the one it restored from disk.
	select {
	case <-s.cfg.Views.Ready():
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
	// And until the settings parts synced: a policy not read yet must
	// not let the agent resolve everything.
	if err := s.settings.Wait(ctx); err != nil {
		return nil, nil, err
	}
	release, err := s.admit.acquire(ctx)
	if err != nil {
		return nil, nil, err
	}
	undo = append(undo, release)
	a = &agent{
		pod: ver.pod, namespace: ver.namespace, claimedPod: ver.claimedPod, clusterDomain: id.GetClusterDomain(),
		instanceID: id.GetInstanceId(), agentVersion: id.GetAgentVersion(),
		connected: s.cfg.Now(), out: out, admitted: release,
		// The caller sends the first response itself.
		scheduled: true, id: ver.id, features: id.GetFeatures(),
	}
	if !ver.id.Verified() {
		// Insecure: the claimed names are all there is. A verified
		// identity keeps its own: a SPIFFE one has no pod, so settings
		// selected by pod never follow a pod name the agent picked.
		a.id.Namespace, a.id.Pod = ver.namespace, ver.pod
	}
	a.sentID, a.sentSettings = splitVersion(first.GetVersionInfo())
	// Subscribe before composing, so a change in between is composed
	// again below rather than missed.
	settingsChanged := s.settings.Changed()
	s.composeSettings(a)
	if p, ok := peer.FromContext(ctx); ok {
		a.peer = p.Addr.String()
	}
	// Until the first send is done, a is scheduled and wake does not
	// look at a.sub.
	a.sub = s.cfg.Views.Subscribe(ver.viewKey(), func() { s.wake(a) })
	undo = append(undo, a.sub.Close)
	s.add(a)
	undo = append(undo, func() { s.remove(a) })
	if s.track(a) {
		s.stop(a, errPodDeleted)
	}
	undo = append(undo, func() { s.untrack(a) })
	if exp := ver.id.Expires; !exp.IsZero() {
		// The stream lasts as long as the credential that opened it.
		t := time.AfterFunc(exp.Sub(s.cfg.Now()), func() { s.stop(a, errExpired) })
		undo = append(undo, func() { t.Stop() })
	}
	select {
	case <-settingsChanged:
		// Before the agent was in s.agents: watchSettings may have missed it.
		s.composeSettings(a)
	default:
	}
	s.log.Info("agent connected", "pod", a.namespace+"/"+a.pod, "instance", a.instanceID, "peer", a.peer,
		"version", first.GetVersionInfo())
	if rv := first.GetRejectedVersion(); rv != "" {
		// Before the first send: the report that quarantines a table
		// keeps it from this agent as well.
		s.crashed(a, rv, first.GetVersionInfo(), first.GetErrorDetail().GetMessage())
	}
	return a, undoAll, nil
}

// sendFirst sends a's first response, after open. An agent held at its
// own table (rollout.go) is sent nothing, so no answer will come to free
// its admission slot: the next stream takes it now. The caller is the
// only one to touch a.admitted until a's answers are read.
func (s *Server) sendFirst(a *agent) {
	s.send(a)
	a.mu.Lock()
	unsent := a.nonce == 0
	a.mu.Unlock()
	if unsent && a.admitted != nil {
		a.admitted()
		a.admitted = nil
	}
}

// close ends a's stream, which ended with err (its reader's), runs done
// (open's undo) and returns the stream's status.
func (s *Server) close(a *agent, done func(), err error) error {
	defer done()
	stopped := s.end(a)
	log := a.logger(s.log)
	switch {
	case stopped != nil:
		log.Info("agent stream ended", "err", status.Convert(stopped).Message())
		s.m.streams.WithLabelValues(stopResult(stopped)).Inc()
		return stopped
	case a.sub.Rebind():
		// The namespace got a view of its own (view.Shared): the agent
		// reconnects at once and resumes with a delta.
		log.Info("agent told to reconnect: its namespace has a view of its own now")
		return errRebind
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

// wake has a sender look at a: its view has a new version, the agent must
// rebind, or the agent answered. Called by the view (with its lock held)
// and by the handler. A sender at work reads the view's current version
// under a.mu before it stops, so a wake it ignores is never lost.
func (s *Server) wake(a *agent) {
	a.mu.Lock()
	switch {
	case a.scheduled || a.ended:
		a.mu.Unlock()
	case a.sub.Rebind():
		s.endLocked(a, errRebind)
	case a.held:
		a.mu.Unlock()
	default:
		a.scheduled = true
		a.mu.Unlock()
		s.fan.push(a)
	}
}

// endLocked ends the stream with err (errRebind, or what stop set) from
// outside its handler, which is blocked reading: the status goes to the
// agent at once, and ending the stream ends the handler's RecvMsg. (A
// stream context of our own to cancel would cost every stream two
// contexts for these rare events; TestInventedNamespacesShareOneView
// fails if gRPC drops the method.) Called with a.mu held, which it
// releases; no sender may be at work.
func (s *Server) endLocked(a *agent, err error) {
	a.ended = true
	a.mu.Unlock()
	if !a.out.end(err) {
		s.log.Error("cannot end an agent's stream: gRPC's stream has no WriteStatus", "pod", a.namespace+"/"+a.pod)
	}
}

// stop ends a's stream with err: at once when no sender is at work, else
// by the sender before it sends again. A stream ending already (its
// handler returning, or told to rebind) or stopped keeps its reason.
func (s *Server) stop(a *agent, err error) {
	a.mu.Lock()
	if a.ended || a.stopped != nil {
		a.mu.Unlock()
		return
	}
	a.stopped = err
	if a.scheduled {
		a.mu.Unlock()
		return
	}
	s.endLocked(a, err)
}

// stopResult is the result label of a stream stop ended.
func stopResult(err error) string {
	if err == errPodDeleted {
		return "pod_deleted"
	}
	return "expired"
}

// end stops all sending to a and waits for a send in progress, so nothing
// touches the stream after its handler returned. It returns why stop
// ended the stream, or nil.
func (s *Server) end(a *agent) error {
	a.mu.Lock()
	a.ended = true
	stopped := a.stopped
	var idle chan struct{}
	if a.sending {
		idle = make(chan struct{})
		a.idle = idle
	}
	a.mu.Unlock()
	if idle != nil {
		<-idle
	}
	return stopped
}

// send brings a up to its view's current version, one response at a time,
// while it may; the caller has set a.scheduled.
func (s *Server) send(a *agent) {
	v := a.sub.View()
	// What this call sent last: the agent's answer to it may come before
	// the loop looks again (agentstream writes the response before Send
	// returns), and a NACK of a full table moves sentID back to the table
	// the agent kept without asking for anything to be sent. Sending the
	// same version again would only be rejected again: the answer's
	// handler sets needFull, or wakes, when it wants more.
	var lastID, lastSettings string
	for {
		a.mu.Lock()
		switch {
		case a.ended:
			a.scheduled = false
			a.mu.Unlock()
			return
		case a.stopped != nil:
			a.scheduled = false
			s.endLocked(a, a.stopped)
			return
		case a.sub.Rebind():
			a.scheduled = false
			s.endLocked(a, errRebind)
			return
		}
		// Only for a stream that goes on, and under the same a.mu as
		// the check above: the rollout may make a a canary here, and
		// an agent queued before its stream ended and taken off the
		// queue after its handler left the gate would hold that slot
		// for good (nothing would leave it again), holding the view's
		// new versions from every other agent.
		target := s.targetLocked(a, v)
		switch {
		case target == unproven:
			// Held at the table it has (rollout.go): the server has
			// nothing proven to send, not even settings without a table.
			a.scheduled = false
			a.mu.Unlock()
			return
		case a.nonce > 0 && !a.needFull && target.ID == a.sentID &&
			(a.settings.Version == a.sentSettings || a.refused && a.settings.Version == a.refusedSettings):
			// Up to date (or a stale wake-up).
			a.scheduled = false
			a.mu.Unlock()
			return
		case lastID != "" && !a.needFull && target.ID == lastID && a.settings.Version == lastSettings:
			a.scheduled = false
			a.mu.Unlock()
			return
		case !a.canSendLocked():
			if !a.held {
				a.held = true
				a.holds++
				s.m.holds.Inc()
			}
			a.scheduled = false
			a.mu.Unlock()
			return
		}
		full, base := a.needFull, a.sentID
		st, heldSettings := a.settings, a.sentSettings
		a.needFull = false
		a.nonce++
		n := a.nonce
		if full {
			// Claim the full table's nonce now, so a NACK of an older
			// response arriving before the write sees that a repair is
			// on its way.
			a.lastFull = n
		}
		a.sentID, a.sentSettings = target.ID, st.Version
		lastID, lastSettings = target.ID, st.Version
		a.sending = true
		a.mu.Unlock()

		var p *view.Prepared
		if full {
			p = target.Full()
		} else {
			p = v.Response(base, target)
		}
		e, err := s.encode(p, n, st, heldSettings)
		if err != nil {
			// A bug (the view's encoding changed): the agent gets
			// nothing more until it reconnects, rather than a wrong
			// version.
			a.logger(s.log).Error("cannot send to agent", "err", err)
			a.mu.Lock()
			a.sending, a.scheduled = false, false
			if a.idle != nil {
				close(a.idle)
				a.idle = nil
			}
			if a.stopped != nil && !a.ended {
				s.endLocked(a, a.stopped) // stop left it to us
				return
			}
			a.mu.Unlock()
			return
		}
		a.mu.Lock()
		a.sentBytes += uint64(e.size)
		a.ring[n%ringSize] = inflight{nonce: n, version: target, full: p.Kind == "full", settings: st.Version, bytes: a.sentBytes}
		if p.Kind == "full" {
			a.lastFull = n
		}
		a.mu.Unlock()
		err = a.out.sendMsg(e)
		if err == nil {
			count, bytes := s.m.push(p.Kind)
			count.Inc()
			bytes.Add(float64(e.size))
		}
		a.mu.Lock()
		a.sending = false
		if a.idle != nil {
			close(a.idle)
			a.idle = nil
		}
		if err != nil {
			// The stream is over; its handler's RecvMsg fails too.
			a.scheduled = false
			a.mu.Unlock()
			return
		}
		a.mu.Unlock()
	}
}

// receive reads ACKs and NACKs off a grpc-go stream until it ends.
func (s *Server) receive(st grpc.ServerStream, a *agent) error {
	// One answer per stream, reused: the codec decodes an ACK into it
	// without allocating.
	var ans answer
	for {
		if err := st.RecvMsg(&ans); err != nil {
			return err
		}
		s.answer(a, &ans)
	}
}

// answer handles one of the agent's ACKs or NACKs.
func (s *Server) answer(a *agent, ans *answer) {
	if a.admitted != nil {
		a.admitted()
		a.admitted = nil
	}
	if !ans.nonceOK {
		a.logger(s.log).Warn("ignoring request with a bad nonce", "nonce", string(ans.rawNonce))
		return
	}
	n := ans.nonce
	if ans.failing != nil && s.report(a, ans.failing, n) {
		return // a repeated answer that carries a report only
	}
	now := s.cfg.Now()
	a.mu.Lock()
	f, known := a.answerLocked(n)
	if string(ans.version) != a.acked {
		if known && f.settings == "" && string(ans.version) == f.version.ID {
			a.acked = f.version.ID // the view's string: no copy per agent
		} else {
			a.acked = string(ans.version)
		}
	}
	if ans.nack == nil {
		a.ackedAt = now
		wake := a.releaseLocked()
		a.mu.Unlock()
		if known {
			s.observeAck(f, a.connected, now)
			if s.roll.acked(a, f.version) {
				s.wakeGate(a.gate) // a canary's ACK released it
			}
		}
		if wake {
			s.wake(a)
		}
		return
	}
	s.nackLocked(a, ans, f, known, n)
}

// nackLocked handles the agent's NACK of response n (f, when known); a.mu
// is held and released.
func (s *Server) nackLocked(a *agent, ans *answer, f inflight, known bool, n uint64) {
	detail := ans.nack.GetErrorDetail()
	a.nacks++
	a.lastNack = detail.GetMessage()
	// A NACKed delta means the agent's table is not what we think:
	// send a full table, unless one went out after the NACKed
	// response (it already repairs the agent; pipelined deltas
	// NACKed after it must not trigger a full table each). A NACKed
	// full table is not resent: the agent would reject it again; it
	// keeps its last good table until the next version. Nor is
	// what an agent crashed running (ABORTED), delta or full: its
	// table is the one it kept.
	aborted := detail.GetCode() == codeAborted
	resend := !aborted && (!known || !f.full) && a.lastFull < n
	if resend {
		a.needFull = true
	} else if known && (f.full || aborted) && n == a.nonce {
		// The agent kept its table: base the next delta on it
		// (a full table again if it is not in the history), and do
		// not send the refused settings again for this table.
		a.sentID, a.sentSettings = splitVersion(a.acked)
		a.refused, a.refusedSettings = true, f.settings
	}
	wake := a.releaseLocked() || resend
	kept := a.acked
	a.mu.Unlock()
	s.m.nacks.Inc()
	if aborted {
		// The agent crashed running what it rejects.
		rejected := ans.nack.GetRejectedVersion()
		if rejected == "" && known {
			rejected = joinVersion(f.version.ID, f.settings)
		}
		if rejected != "" {
			s.crashed(a, rejected, kept, detail.GetMessage())
		}
	}
	kind := "delta"
	if f.full {
		kind = "full"
	}
	a.logger(s.log).Warn("agent rejected table", "nonce", n, "kind", kind, "code", detail.GetCode(),
		"err", detail.GetMessage(), "kept", a.acked, "resend_full", resend)
	if wake {
		s.wake(a)
	}
}

// answerLocked records that the agent answered nonce n, and so everything
// sent before it (an agent answers in order), and returns what n was.
func (a *agent) answerLocked(n uint64) (inflight, bool) {
	if n <= a.answered || n > a.nonce {
		return inflight{}, false // stale or never sent
	}
	f := a.ring[n%ringSize]
	if f.nonce != n {
		return inflight{}, false
	}
	a.answered, a.ansBytes = n, f.bytes
	for i := range a.ring {
		if a.ring[i].nonce <= n {
			a.ring[i] = inflight{}
		}
	}
	return f, true
}

// releaseLocked ends a hold the agent's answer lifted; true when a sender
// must look at the agent again.
func (a *agent) releaseLocked() bool {
	if a.held && a.canSendLocked() {
		a.held = false
		return true
	}
	return false
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
