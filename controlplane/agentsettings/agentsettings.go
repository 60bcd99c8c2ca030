// Package agentsettings composes the AgentSettings each agent is sent: the
// parts (DNS policy, the pod's zone, telemetry opt-ins, forwarding) each
// fill their own fields for one authenticated agent, and Compose turns them
// into one message, its encoding and a version that names its content.
//
// Views are shared by every agent of a namespace; settings are per agent
// (a policy selects pods by label, a zone is the pod's node's), so the
// server composes them per stream and sends them beside the shared table.
package agentsettings

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"reflect"
	"slices"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/meshdns/meshdns/controlplane/auth"
	"github.com/meshdns/meshdns/internal/namewire"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// Part fills some fields of an agent's settings.
type Part interface {
	// Fill sets this part's fields of s for the agent id, from caches
	// only (never blocks on the network).
	Fill(id auth.Identity, s *meshdnsv1.AgentSettings)
	// Changed returns a channel closed at the next change that may alter
	// Fill's result for some agent.
	Changed() <-chan struct{}
}

// Feature names of AgentSettings.requires and AgentIdentity.features.
const (
	FeaturePolicy        = "policy"
	FeatureForwarding    = "forwarding"
	FeatureQueryLog      = "query-log"
	FeatureFailingReport = "failing-report"
	FeaturePodZone       = "pod-zone"
)

// Settings composes parts. Safe for concurrent use; Run must be running
// for Changed to fire.
type Settings struct {
	parts []Part
	subs  []<-chan struct{} // the parts' Changed channels, taken at Compose

	mu      sync.Mutex    // guards following
	changed chan struct{} // closed at the next change of any part

	cacheMu  sync.Mutex                          // guards following
	policies map[*meshdnsv1.DNSPolicy]*policyEnc // encodings of shared policies
}

// Compose returns the settings the parts fill, in order (a later part may
// overwrite a field an earlier one set). No parts: every agent's settings
// are empty.
func Compose(parts ...Part) *Settings {
	s := &Settings{parts: slices.Clone(parts), changed: make(chan struct{}), policies: map[*meshdnsv1.DNSPolicy]*policyEnc{}}
	// Subscribe now, not when Run starts: a change between Compose and
	// Run's first select would otherwise be lost.
	for _, p := range s.parts {
		s.subs = append(s.subs, p.Changed())
	}
	return s
}

// Agent is one agent's settings as the server sends them.
type Agent struct {
	// Msg is the composed message, requires filled in; never nil.
	Msg *meshdnsv1.AgentSettings
	// shared is the policy's field, shared with every agent of that
	// policy (a thousand rules are 40 KB: not a copy per agent); rest the
	// other fields. Together, Msg's deterministic encoding.
	shared, rest []byte
	// Version names the content: 16 hex digits of a SHA-256 over the
	// encoding (the policy's hashed apart, once per policy object), ""
	// for empty settings. Equal settings have equal versions, in every
	// replica.
	Version string
}

// Empty reports whether a carries no setting.
func (a Agent) Empty() bool { return a.Size() == 0 }

// Size is the length of Msg's encoding.
func (a Agent) Size() int { return len(a.shared) + len(a.rest) }

// Encoding returns Msg's deterministic encoding in two pieces to be sent
// one after the other: the first may be shared with other agents (a
// policy's); neither may be modified.
func (a Agent) Encoding() (shared, rest []byte) { return a.shared, a.rest }

// AppendEncoding appends Msg's deterministic encoding (the bytes of a
// settings field, without its tag and length) to b.
func (a Agent) AppendEncoding(b []byte) []byte { return append(append(b, a.shared...), a.rest...) }

// Zone is the pod's zone, or "".
func (a Agent) Zone() string { return a.Msg.GetPodZone() }

// PolicySource names the objects the agent's policy came from, or "" for
// none.
func (a Agent) PolicySource() string {
	if p := a.Msg.GetPolicy(); p != nil {
		if p.GetSource() != "" {
			return p.GetSource()
		}
		return "(unnamed)"
	}
	return ""
}

// advisory are the features whose settings only improve answers or
// report on them: an agent that does not list one in its features is sent
// settings without it rather than settings it would NACK (and with them no
// table update at all). Policy and forwarding change what an agent may
// resolve and where, so they are sent to every agent and required: an
// agent that cannot enforce them NACKs and keeps its last version.
var advisory = []string{FeaturePodZone, FeatureQueryLog, FeatureFailingReport}

// For composes the settings of the agent id, which implements features
// (its AgentIdentity.features). Parts read caches only, so For does not
// block; it allocates, so callers compose once per change, not per send.
// A part may give many agents one DNSPolicy (and must not modify it
// afterwards): its encoding is then made once.
func (s *Settings) For(id auth.Identity, features []string) Agent {
	m := &meshdnsv1.AgentSettings{}
	for _, p := range s.parts {
		p.Fill(id, m)
	}
	drop := func(f string) bool { return slices.Contains(advisory, f) && !slices.Contains(features, f) }
	if drop(FeaturePodZone) {
		m.PodZone = ""
	}
	if t := m.GetTelemetry(); t != nil {
		if drop(FeatureQueryLog) {
			t.QueryLog = nil
		}
		if drop(FeatureFailingReport) {
			t.FailingReport = nil
		}
		if t.QueryLog == nil && t.FailingReport == nil {
			m.Telemetry = nil
		}
	}
	m.Requires = Requires(m)
	// The policy (field 1, the bulk of the bytes: a thousand rules are
	// 40 KB) is encoded and hashed once per policy object, which parts
	// share among the agents it selects; the rest is small. Fields in
	// number order are what deterministic marshalling writes.
	pol := m.Policy
	m.Policy = nil
	rest, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	m.Policy = pol
	if err != nil {
		// Only invalid UTF-8 in a string fails; parts build their strings
		// from validated objects, so this is a bug of a part.
		panic("agentsettings: marshal: " + err.Error())
	}
	a := Agent{Msg: m, rest: rest}
	h := sha256.New()
	if pol != nil {
		pe := s.policyEncoding(pol)
		a.shared = pe.field
		h.Write(pe.sum[:])
	}
	if !a.Empty() {
		h.Write(rest)
		a.Version = hex.EncodeToString(h.Sum(nil)[:8])
	}
	return a
}

// policyEnc is a policy's field (tag, length, message) and its hash.
type policyEnc struct {
	field []byte
	sum   [sha256.Size]byte
}

// maxPolicyCache bounds the policies whose encodings are kept: more than
// a cluster has selections at once; when full it starts over.
const maxPolicyCache = 1024

// policyEncoding returns p's encoding, from the cache when p was encoded
// before. Parts must not modify a policy after handing it to Fill.
func (s *Settings) policyEncoding(p *meshdnsv1.DNSPolicy) *policyEnc {
	s.cacheMu.Lock()
	pe, ok := s.policies[p]
	s.cacheMu.Unlock()
	if ok {
		return pe
	}
	body, err := proto.MarshalOptions{Deterministic: true}.Marshal(p)
	if err != nil {
		panic("agentsettings: marshal policy: " + err.Error())
	}
	field := namewire.AppendSettingsPolicy(make([]byte, 0, len(body)+8), body)
	pe = &policyEnc{field: field, sum: sha256.Sum256(field)}
	s.cacheMu.Lock()
	if len(s.policies) >= maxPolicyCache {
		clear(s.policies)
	}
	s.policies[p] = pe
	s.cacheMu.Unlock()
	return pe
}

// Requires returns the features m uses, sorted, with any m already
// requires: the agent must NACK a version whose settings it cannot apply
// in full.
func Requires(m *meshdnsv1.AgentSettings) []string {
	req := slices.Clone(m.GetRequires())
	if m.GetPolicy() != nil {
		req = append(req, FeaturePolicy)
	}
	if len(m.GetForwarding()) > 0 {
		req = append(req, FeatureForwarding)
	}
	if m.GetTelemetry().GetQueryLog() != nil {
		req = append(req, FeatureQueryLog)
	}
	if m.GetTelemetry().GetFailingReport() != nil {
		req = append(req, FeatureFailingReport)
	}
	if m.GetPodZone() != "" {
		req = append(req, FeaturePodZone)
	}
	slices.Sort(req)
	req = slices.Compact(req)
	if len(req) == 0 {
		return nil
	}
	return req
}

// Changed returns a channel closed at the next change of any part (while
// Run runs). A stream then composes its agent's settings again and sends
// them only if their version differs.
func (s *Settings) Changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

// Run forwards the parts' changes to Changed until ctx ends. Without
// parts it only waits.
func (s *Settings) Run(ctx context.Context) error {
	cases := make([]reflect.SelectCase, len(s.parts)+1)
	cases[0] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())}
	for i, ch := range s.subs {
		cases[i+1] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ch)}
	}
	for {
		i, _, _ := reflect.Select(cases)
		if i == 0 {
			return nil
		}
		// Take the part's next channel before announcing the change, so a
		// change after Fill reads the new state is never missed.
		cases[i].Chan = reflect.ValueOf(s.parts[i-1].Changed())
		s.mu.Lock()
		close(s.changed)
		s.changed = make(chan struct{})
		s.mu.Unlock()
	}
}

// Runner is a part that watches something (an informer): the control
// plane runs it beside its sources, until ctx ends. An error stops the
// control plane.
type Runner interface {
	Run(ctx context.Context) error
}

// Readier is a part whose Fill is incomplete until its caches synced
// (a policy not yet read would let an agent resolve everything): streams
// wait for it before their first response.
type Readier interface {
	Ready() <-chan struct{}
}

// Runners returns the parts that implement Runner.
func (s *Settings) Runners() []Runner {
	var rs []Runner
	for _, p := range s.parts {
		if r, ok := p.(Runner); ok {
			rs = append(rs, r)
		}
	}
	return rs
}

// Wait returns once every part that implements Readier is ready, or with
// ctx's error.
func (s *Settings) Wait(ctx context.Context) error {
	for _, p := range s.parts {
		r, ok := p.(Readier)
		if !ok {
			continue
		}
		select {
		case <-r.Ready():
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}
