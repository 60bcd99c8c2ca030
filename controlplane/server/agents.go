package server

import (
	"sort"
	"time"

	"github.com/meshdns/meshdns/controlplane/agentsettings"
	"github.com/meshdns/meshdns/controlplane/view"
)

// AgentInfo describes a connected agent for /debug/agents.
type AgentInfo struct {
	// Pod is the pod the stream speaks for: the one its credential
	// proves (a pod-bound token), "sa:<serviceaccount>" when the
	// credential proves only a service account (SPIFFE), or the claimed
	// one without authentication.
	Pod string `json:"pod"`
	// ClaimedPod is the pod the agent claims when its credential proves
	// none (SPIFFE): unverified, for debugging only.
	ClaimedPod    string    `json:"claimedPod,omitempty"`
	Namespace     string    `json:"namespace"`
	ClusterDomain string    `json:"clusterDomain"`
	InstanceID    string    `json:"instanceID"`
	AgentVersion  string    `json:"agentVersion,omitempty"`
	Peer          string    `json:"peer"`
	Connected     time.Time `json:"connected"`
	// Sent is the version the agent has once it applies everything sent.
	Sent string `json:"sent"`
	// Acked is the version the agent last ACKed (applied).
	Acked   string    `json:"acked"`
	AckedAt time.Time `json:"ackedAt,omitzero"`
	// View is the version the agent should hold: the current version of
	// its view, with its current settings' (see Settings).
	View string `json:"view"`
	// Settings are the agent's current settings; nil for none.
	Settings *SettingsInfo `json:"settings,omitempty"`
	Nacks    int           `json:"nacks"`
	LastNack string        `json:"lastNack,omitempty"`
	// Holds counts the times the agent's versions were held back
	// because it had not answered enough of what it was sent.
	Holds int `json:"holds"`
	// Rejected is the table the agent reported crashing on (it restored
	// the version before it; /debug/quarantine), or "".
	Rejected string `json:"rejected,omitempty"`
	// Failing is the agent's last report of the names that failed most
	// for its pod, when its settings turn the report on.
	Failing *FailingReport `json:"failing,omitempty"`
}

// SettingsInfo summarises an agent's settings.
type SettingsInfo struct {
	// Version names their content (the part of View after "+").
	Version string `json:"version"`
	// Policy names the objects of the agent's DNS policy, "" for none.
	Policy string `json:"policy,omitempty"`
	// Zone is the pod's zone, "" when unknown (or the agent does not
	// implement pod-zone).
	Zone string `json:"zone,omitempty"`
	// Forwarding counts the forwarding rules.
	Forwarding int `json:"forwarding,omitempty"`
	// QueryLog and FailingReport say whether those are on.
	QueryLog      bool `json:"queryLog,omitempty"`
	FailingReport bool `json:"failingReport,omitempty"`
	// Requires are the features the settings require.
	Requires []string `json:"requires,omitempty"`
}

func settingsInfo(st agentsettings.Agent) *SettingsInfo {
	if st.Empty() {
		return nil
	}
	return &SettingsInfo{
		Version: st.Version, Policy: st.PolicySource(), Zone: st.Zone(), Forwarding: len(st.Msg.GetForwarding()),
		QueryLog: st.Msg.GetTelemetry().GetQueryLog() != nil, FailingReport: st.Msg.GetTelemetry().GetFailingReport() != nil,
		Requires: st.Msg.GetRequires(),
	}
}

// Agents lists the connected agents, sorted by namespace and pod.
func (s *Server) Agents() []AgentInfo {
	s.mu.Lock()
	as := make([]*agent, 0, len(s.agents))
	for a := range s.agents {
		as = append(as, a)
	}
	s.mu.Unlock()
	out := make([]AgentInfo, 0, len(as))
	for _, a := range as {
		out = append(out, a.info())
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		if out[i].Pod != out[j].Pod {
			return out[i].Pod < out[j].Pod
		}
		return out[i].Connected.Before(out[j].Connected)
	})
	return out
}

// AgentView returns the view of the agent namespace/pod (the most recently
// connected stream of that pod), or nil if it is not connected.
func (s *Server) AgentView(namespace, pod string) *view.View {
	s.mu.Lock()
	defer s.mu.Unlock()
	var best *agent
	for a := range s.agents {
		if a.namespace == namespace && a.pod == pod && (best == nil || a.connected.After(best.connected)) {
			best = a
		}
	}
	if best == nil {
		return nil
	}
	return best.sub.View()
}

func (s *Server) add(a *agent) {
	s.roll.join(a, s.viewDropped)
	s.mu.Lock()
	s.agents[a] = struct{}{}
	n := len(s.agents)
	s.mu.Unlock()
	s.m.agents.Set(float64(n))
}

func (s *Server) remove(a *agent) {
	s.mu.Lock()
	delete(s.agents, a)
	n := len(s.agents)
	s.mu.Unlock()
	s.m.agents.Set(float64(n))
	a.mu.Lock()
	// A pod deleted, or one moving to its namespace's own view, will not
	// report on this view: its canary slot is free at once.
	final := a.stopped == errPodDeleted || a.sub.Rebind()
	a.mu.Unlock()
	if s.roll.leave(a, final, func() bool { return s.seenDeleted(a) }) {
		s.wakeGate(a.gate)
	}
}

// viewDropped reports whether the store no longer serves v to new
// agents: it dropped v (idle for its IdleTTL), or v's namespace is
// served by another view now.
func (s *Server) viewDropped(v *view.View) bool {
	return s.cfg.Views.Lookup(v.Key()) != v
}
