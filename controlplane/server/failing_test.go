package server_test

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/meshdns/meshdns/controlplane/agentsettings"
	"github.com/meshdns/meshdns/controlplane/auth"
	"github.com/meshdns/meshdns/controlplane/internal/cptest"
	"github.com/meshdns/meshdns/controlplane/server"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// reportPart asks every agent for the failing report while asked is set.
type reportPart struct {
	asked atomic.Bool
	agentsettings.Notifier
}

func (p *reportPart) Fill(_ auth.Identity, s *meshdnsv1.AgentSettings) {
	if p.asked.Load() {
		s.Telemetry = &meshdnsv1.Telemetry{FailingReport: &meshdnsv1.FailingReport{Enabled: true}}
	}
}

// TestFailingReport: a report repeating the last ACK is kept for the
// agent and changes nothing else; one on a new ACK is kept and the ACK
// counts; what exceeds the bounds is dropped and counted.
func TestFailingReport(t *testing.T) {
	part := &reportPart{}
	part.asked.Store(true)
	h := newHarness(t, harnessOpts{server: func(c *server.Config) { c.Settings = agentsettings.Compose(part) }})
	h.publish(t, entry("a.corp.example", "10.0.0.1"))
	a := cptest.Dial(t, h.addr, cptest.DialOpts{Namespace: "ns", Pod: "web-0", Features: []string{agentsettings.FeatureFailingReport}})
	r1 := a.Next()
	info := func() server.AgentInfo {
		t.Helper()
		var got server.AgentInfo
		waitFor(t, "the agent", func() bool {
			as := h.srv.Agents()
			if len(as) == 1 {
				got = as[0]
			}
			return len(as) == 1
		})
		return got
	}
	var acked server.AgentInfo
	waitFor(t, "the first ACK", func() bool { acked = info(); return acked.Acked == a.Version })

	// A repeat of the ACK with a report: the report only.
	a.Send(&meshdnsv1.StreamNameTableRequest{VersionInfo: a.Version, ResponseNonce: r1.GetNonce(),
		Failing: &meshdnsv1.FailingNames{WindowSeconds: 60, Names: []*meshdnsv1.FailingName{
			{Name: "nope.ns.svc.cluster.local.", Rcode: 3, Count: 12},
			{Name: "api.example.com.", Rcode: 2, Count: 4},
		}}})
	var got server.AgentInfo
	waitFor(t, "the report", func() bool { got = info(); return got.Failing != nil })
	want := &server.FailingReport{Received: got.Failing.Received, WindowSeconds: 60, Names: []server.FailingName{
		{Name: "nope.ns.svc.cluster.local.", Rcode: "NXDOMAIN", Count: 12},
		{Name: "api.example.com.", Rcode: "SERVFAIL", Count: 4},
	}}
	if diff := cmp.Diff(want, got.Failing); diff != "" {
		t.Errorf("report (-want +got):\n%s", diff)
	}
	if !got.AckedAt.Equal(acked.AckedAt) || got.Acked != acked.Acked || got.Nacks != 0 {
		t.Errorf("a report changed the stream: acked %q at %v, was %q at %v", got.Acked, got.AckedAt, acked.Acked, acked.AckedAt)
	}
	a.None(100 * time.Millisecond)

	// Beyond the bounds: at most MaxReportNames names, none longer than
	// MaxReportName.
	many := &meshdnsv1.FailingNames{WindowSeconds: 30}
	for i := range server.MaxReportNames + 5 {
		many.Names = append(many.Names, &meshdnsv1.FailingName{Name: fmt.Sprintf("n%d.example.", i), Rcode: 3, Count: 1})
	}
	many.Names[0].Name = strings.Repeat("x", server.MaxReportName+1) + "."
	a.Send(&meshdnsv1.StreamNameTableRequest{VersionInfo: a.Version, ResponseNonce: r1.GetNonce(), Failing: many})
	waitFor(t, "the bounded report", func() bool { got = info(); return got.Failing.WindowSeconds == 30 })
	if n, d := len(got.Failing.Names), got.Failing.Dropped; n != server.MaxReportNames || d != 5 {
		t.Errorf("kept %d names, dropped %d; want %d and 5", n, d, server.MaxReportNames)
	}
	if got.Failing.Names[0].Name != "n1.example." {
		t.Errorf("first name kept %q, want n1.example. (the long one dropped)", got.Failing.Names[0].Name)
	}

	// A report on the ACK of a new version: both count.
	h.publish(t, entry("a.corp.example", "10.0.0.2"))
	r2 := a.Recv()
	if err := a.Apply(r2); err != nil {
		t.Fatal(err)
	}
	a.Send(&meshdnsv1.StreamNameTableRequest{VersionInfo: a.Version, ResponseNonce: r2.GetNonce(),
		Failing: &meshdnsv1.FailingNames{WindowSeconds: 15}})
	waitFor(t, "the new ACK and its report", func() bool {
		got = info()
		return got.Acked == a.Version && got.Failing.WindowSeconds == 15
	})
	if len(got.Failing.Names) != 0 || got.Acked == acked.Acked {
		t.Errorf("after the ACK with a report: %+v", got)
	}

	// Settings that stop asking: the report kept is no longer shown, and
	// a report nobody asked for is dropped.
	part.asked.Store(false)
	part.Notify()
	r3 := a.Next()
	waitFor(t, "the settings without the report", func() bool { got = info(); return got.Acked == a.Version })
	if got.Failing != nil {
		t.Errorf("report shown after the settings stopped asking: %+v", got.Failing)
	}
	a.Send(&meshdnsv1.StreamNameTableRequest{VersionInfo: a.Version, ResponseNonce: r3.GetNonce(),
		Failing: &meshdnsv1.FailingNames{WindowSeconds: 20, Names: []*meshdnsv1.FailingName{{Name: "x.", Rcode: 3, Count: 1}}}})
	a.None(200 * time.Millisecond)
	if got = info(); got.Failing != nil || got.Acked != a.Version {
		t.Errorf("a report nobody asked for: %+v", got)
	}
}
