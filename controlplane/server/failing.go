package server

import (
	"strconv"
	"time"
	"unicode/utf8"

	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// An agent whose settings turn the failing report on
// (Telemetry.failing_report) sends, about once a window, the names that
// failed most for its pod (StreamNameTableRequest.failing): on an ACK, or
// on a repeat of its last answer when no new version came. A repeat
// changes nothing of the stream's state; the stream keeps the last report
// until the agent disconnects, for /debug/agents and /debug/failing,
// filed under what the agent's credential proves (AgentInfo.Pod): its pod
// for a pod-bound token, "sa:<serviceaccount>" for a SPIFFE identity,
// never a pod the agent only claims.

// Bounds of a stored report: what an agent sends beyond them is dropped
// (and counted in FailingReport.Dropped), so a report costs the control
// plane at most MaxReportNames*(MaxReportName+~60) bytes per agent.
const (
	// MaxReportNames is the most names kept of one report (the agent's
	// own bound, pkg/proxy's MaxFailingTopN).
	MaxReportNames = 50
	// MaxReportName is the longest name kept, in bytes: a 255-byte wire
	// name in presentation form with a few escapes.
	MaxReportName = 512
)

// FailingReport is an agent's last report of the names that failed most
// for its pod.
type FailingReport struct {
	// Received is when the control plane got the report.
	Received time.Time `json:"received"`
	// WindowSeconds is the length of the window the counts cover.
	WindowSeconds uint32 `json:"windowSeconds"`
	// Names, the most frequent first.
	Names []FailingName `json:"names"`
	// Dropped counts names of the report beyond the bounds.
	Dropped int `json:"dropped,omitempty"`
}

// FailingName is one name and how often it failed with one rcode.
type FailingName struct {
	Name string `json:"name"`
	// Rcode is the response code's name: NXDOMAIN, SERVFAIL, REFUSED, or
	// RCODE<n> for another.
	Rcode string `json:"rcode"`
	// Count is a lower bound of the answers with that rcode in the window.
	Count uint64 `json:"count"`
}

// newFailingReport keeps what fits the bounds of f.
func newFailingReport(f *meshdnsv1.FailingNames, now time.Time) *FailingReport {
	r := &FailingReport{Received: now, WindowSeconds: f.GetWindowSeconds()}
	names := f.GetNames()
	r.Names = make([]FailingName, 0, min(len(names), MaxReportNames))
	for _, n := range names {
		if len(r.Names) == MaxReportNames || len(n.GetName()) > MaxReportName || !utf8.ValidString(n.GetName()) {
			r.Dropped++
			continue
		}
		r.Names = append(r.Names, FailingName{Name: n.GetName(), Rcode: RcodeName(n.GetRcode()), Count: n.GetCount()})
	}
	return r
}

// RcodeName names a DNS response code as /debug/failing shows it.
func RcodeName(rcode uint32) string {
	switch rcode {
	case 2:
		return "SERVFAIL"
	case 3:
		return "NXDOMAIN"
	case 5:
		return "REFUSED"
	}
	return "RCODE" + strconv.FormatUint(uint64(rcode), 10)
}

// report keeps the report f of agent a, received with an answer to nonce
// n, when the agent's settings ask for one (a report nobody asked for is
// dropped: names leave a pod only by opt-in), and reports whether the
// request was only a report: a repeat of an answer the stream already
// had, which must change nothing else.
func (s *Server) report(a *agent, f *meshdnsv1.FailingNames, n uint64) (only bool) {
	r := newFailingReport(f, s.cfg.Now())
	a.mu.Lock()
	defer a.mu.Unlock()
	if asksReport(a.settings.Msg) {
		a.failing = r
	} else {
		a.failing = nil
	}
	return n <= a.answered
}

// asksReport reports whether settings turn the failing report on.
func asksReport(s *meshdnsv1.AgentSettings) bool {
	return s.GetTelemetry().GetFailingReport().GetEnabled()
}

// failingLocked is the report /debug/agents shows: none once the agent's
// settings stopped asking for it.
func (a *agent) failingLocked() *FailingReport {
	if !asksReport(a.settings.Msg) {
		return nil
	}
	return a.failing
}
