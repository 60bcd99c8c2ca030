package agent

import (
	"slices"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/agent/discovery/discoverytest"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// TestFailingReport: over a real stream, the agent reports the names that
// failed only while the control plane's settings ask for it, as a repeat
// of its last ACK.
func TestFailingReport(t *testing.T) {
	defer func(w time.Duration) { minFailingWindow = w }(minFailingWindow)
	minFailingWindow = time.Second
	const window = time.Second

	up := startUpstream(t)
	cp := discoverytest.Start(t, "127.0.0.1:0", nil)
	a := startAgent(t, Config{ControlPlanes: []string{cp.Addr}, Upstreams: []string{up.addr}, PodName: "web-0"})
	if id := cp.Recv(t).GetIdentity(); !slices.Contains(id.GetFeatures(), "failing-report") {
		t.Errorf("features %q, want failing-report among them", id.GetFeatures())
	}
	table := func(report *meshdnsv1.FailingReport) *meshdnsv1.NameTable {
		nt := cpTable(map[string]string{"a.demo.svc.cluster.local": "10.1.0.1"})
		if report != nil {
			nt.Settings = &meshdnsv1.AgentSettings{Telemetry: &meshdnsv1.Telemetry{FailingReport: report}}
		}
		return nt
	}
	nxdomain := func(name string, times int) {
		for range times {
			if m := exchange(t, "udp", a.dns, name, dns.TypeA); m.Rcode != dns.RcodeNameError {
				t.Fatalf("%s: rcode %s, want NXDOMAIN", name, dns.RcodeToString[m.Rcode])
			}
		}
	}

	// Off by default: names fail, nothing is sent.
	cp.Send(discoverytest.Full("v1", "1", table(nil)))
	if ack := cp.Recv(t); ack.GetVersionInfo() != "v1" || ack.GetErrorDetail() != nil || ack.GetFailing() != nil {
		t.Fatalf("ack = %v", ack)
	}
	nxdomain("nope.demo.svc.cluster.local", 2)
	cp.NoRecv(t, 3*window)

	// On: the top names of each window, on a repeat of the last ACK.
	cp.Send(discoverytest.Full("v2", "2", table(&meshdnsv1.FailingReport{Enabled: true, TopN: 2, WindowSeconds: 1})))
	if ack := cp.Recv(t); ack.GetVersionInfo() != "v2" || ack.GetErrorDetail() != nil {
		t.Fatalf("ack = %v", ack)
	}
	nxdomain("often.demo.svc.cluster.local", 3)
	nxdomain("Sometimes.demo.svc.cluster.local", 2)
	nxdomain("once.demo.svc.cluster.local", 1) // beyond top_n
	got := map[string]uint64{}
	for got["often.demo.svc.cluster.local."] < 3 || got["sometimes.demo.svc.cluster.local."] < 2 {
		r := cp.Recv(t)
		if r.GetVersionInfo() != "v2" || r.GetResponseNonce() != "2" || r.GetErrorDetail() != nil || r.GetFailing() == nil {
			t.Fatalf("request %v, want a report repeating the ACK of v2", r)
		}
		if w := r.GetFailing().GetWindowSeconds(); w < 1 {
			t.Errorf("window %ds, want >= 1", w)
		}
		if n := len(r.GetFailing().GetNames()); n > 2 {
			t.Errorf("%d names, want <= top_n 2", n)
		}
		for _, n := range r.GetFailing().GetNames() {
			if n.GetRcode() != dns.RcodeNameError {
				t.Errorf("%s: rcode %d, want NXDOMAIN", n.GetName(), n.GetRcode())
			}
			got[n.GetName()] += n.GetCount()
		}
	}
	if got["often.demo.svc.cluster.local."] != 3 || got["sometimes.demo.svc.cluster.local."] != 2 {
		t.Errorf("counts %v, want often 3, sometimes 2", got)
	}
	// The window after names: an empty report clears them, then nothing.
	for {
		r := cp.Recv(t)
		if r.GetFailing() == nil {
			t.Fatalf("request %v, want a report", r)
		}
		if len(r.GetFailing().GetNames()) == 0 {
			break
		}
	}
	cp.NoRecv(t, 3*window)

	// Off again: the summary is dropped, nothing more is sent.
	cp.Send(discoverytest.Full("v3", "3", table(nil)))
	if ack := cp.Recv(t); ack.GetVersionInfo() != "v3" || ack.GetFailing() != nil {
		t.Fatalf("ack = %v", ack)
	}
	nxdomain("nope.demo.svc.cluster.local", 2)
	cp.NoRecv(t, 3*window)
}
