package agent

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/agent/discovery/discoverytest"
	"github.com/meshdns/meshdns/agent/ingest"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

func cpTable(names map[string]string) *meshdnsv1.NameTable {
	t := &meshdnsv1.NameTable{Table: map[string]*meshdnsv1.NameInfo{}, AuthoritativeZones: []string{"cluster.local"}}
	for n, ip := range names {
		t.Table[n] = &meshdnsv1.NameInfo{Ips: []string{ip}, Registry: "Kubernetes"}
	}
	return t
}

func TestControlPlaneStream(t *testing.T) {
	up := startUpstream(t)
	cp := discoverytest.Start(t, "127.0.0.1:0", nil)
	state := t.TempDir()
	a := startAgent(t, Config{ControlPlanes: []string{cp.Addr}, StateDir: state, Upstreams: []string{up.addr}, PodName: "web-0"})
	query := func(name string) *dns.Msg { return exchange(t, "udp", a.dns, name, dns.TypeA) }

	first := cp.Recv(t)
	if got := first.GetIdentity(); got.GetNamespace() != "demo" || got.GetPodName() != "web-0" || got.GetClusterDomain() != "cluster.local" {
		t.Errorf("identity = %v", got)
	}
	if got := first.GetIdentity().GetInstanceId(); got != a.cfg.InstanceID || got == "" {
		t.Errorf("instance id %q, want the agent's %q", got, a.cfg.InstanceID)
	}
	if a.Ready() {
		t.Error("ready before any table")
	}
	if m := query("a.demo.svc.cluster.local"); m.Rcode != dns.RcodeServerFailure {
		t.Errorf("before the first table: rcode %s, want SERVFAIL", dns.RcodeToString[m.Rcode])
	}

	cp.Send(discoverytest.Full("v1", "n1", cpTable(map[string]string{"a.demo.svc.cluster.local": "10.1.0.1"})))
	if ack := cp.Recv(t); ack.GetVersionInfo() != "v1" || ack.GetErrorDetail() != nil {
		t.Fatalf("ack = %v", ack)
	}
	eventually(t, "ready", a.Ready)
	if diff := cmp.Diff([]string{"a.demo.svc.cluster.local. A 10.1.0.1"}, answerData(query("a.demo.svc.cluster.local"))); diff != "" {
		t.Errorf("(-want +got)\n%s", diff)
	}
	var dump struct {
		Version      string `json:"version"`
		Source       string `json:"source"`
		ControlPlane string `json:"control_plane"`
	}
	_, body := httpGet(t, a.admin+"/debug/nametable")
	if err := json.Unmarshal([]byte(body), &dump); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(struct{ V, S, CP string }{"v1", "controlplane", cp.Addr}, struct{ V, S, CP string }{dump.Version, dump.Source, dump.ControlPlane}); diff != "" {
		t.Errorf("/debug/nametable (-want +got)\n%s", diff)
	}

	// A table the agent's validation rejects is NACKed with the reason;
	// the last good table keeps answering.
	cp.Send(discoverytest.Delta("v2", "n2", "v1", map[string]*meshdnsv1.NameInfo{
		"b.demo.svc.cluster.local": {Ips: []string{"10.1.0.999"}},
	}))
	nack := cp.Recv(t)
	if nack.GetVersionInfo() != "v1" || nack.GetErrorDetail().GetCode() != 3 {
		t.Fatalf("nack = %v", nack)
	}
	if got := counter(t, a.cfg.Registry, "meshdns_agent_table_rejections_total", "source", ingest.SourceControlPlane); got != 1 {
		t.Errorf("rejections = %v, want 1", got)
	}
	if diff := cmp.Diff([]string{"a.demo.svc.cluster.local. A 10.1.0.1"}, answerData(query("a.demo.svc.cluster.local"))); diff != "" {
		t.Errorf("after the NACK (-want +got)\n%s", diff)
	}

	cp.Send(discoverytest.Delta("v3", "n3", "v1", map[string]*meshdnsv1.NameInfo{
		"b.demo.svc.cluster.local": {Ips: []string{"10.1.0.2"}},
	}, "a.demo.svc.cluster.local"))
	if ack := cp.Recv(t); ack.GetVersionInfo() != "v3" {
		t.Fatalf("ack = %v", ack)
	}
	if diff := cmp.Diff([]string{"b.demo.svc.cluster.local. A 10.1.0.2"}, answerData(query("b.demo.svc.cluster.local"))); diff != "" {
		t.Errorf("(-want +got)\n%s", diff)
	}
	if m := query("a.demo.svc.cluster.local"); m.Rcode != dns.RcodeNameError {
		t.Errorf("removed name: rcode %s, want NXDOMAIN", dns.RcodeToString[m.Rcode])
	}
	a.stop()

	// Restart with every control plane down: the persisted v3 answers at
	// once, readiness waits for the grace period.
	dead := cp.Addr
	cp.Stop()
	grace := 400 * time.Millisecond
	start := time.Now()
	b := startAgent(t, Config{ControlPlanes: []string{dead}, StateDir: state, Upstreams: []string{up.addr}, ReadyGrace: grace})
	if diff := cmp.Diff([]string{"b.demo.svc.cluster.local. A 10.1.0.2"}, answerData(exchange(t, "udp", b.dns, "b.demo.svc.cluster.local", dns.TypeA))); diff != "" {
		t.Errorf("restored table (-want +got)\n%s", diff)
	}
	if cur := b.run.tables.Current(); cur == nil || cur.Version != "v3" || cur.Source != ingest.SourceState {
		t.Errorf("restored = %+v, want v3 from state", cur)
	}
	if b.Ready() && time.Since(start) < grace {
		t.Error("ready before the grace period without a control plane")
	}
	eventually(t, "ready after grace", b.Ready)
	if took := time.Since(start); took < grace {
		t.Errorf("ready after %v, before the %v grace", took, grace)
	}
}

func TestControlPlaneResumeAfterRestart(t *testing.T) {
	up := startUpstream(t)
	cp := discoverytest.Start(t, "127.0.0.1:0", nil)
	state := t.TempDir()
	a := startAgent(t, Config{ControlPlanes: []string{cp.Addr}, StateDir: state, Upstreams: []string{up.addr}})
	cp.Recv(t)
	cp.Send(discoverytest.Full("v7", "n1", cpTable(map[string]string{"a.demo.svc.cluster.local": "10.1.0.1"})))
	cp.Recv(t)
	a.stop()

	// The restarted agent reports v7 in its first request, so the control
	// plane can answer with a delta; it is ready once the stream delivers.
	b := startAgent(t, Config{ControlPlanes: []string{cp.Addr}, StateDir: state, Upstreams: []string{up.addr}, ReadyGrace: time.Hour})
	first := cp.Recv(t)
	if first.GetVersionInfo() != "v7" {
		t.Fatalf("first request version_info = %q, want v7", first.GetVersionInfo())
	}
	if b.Ready() {
		t.Error("ready before the stream delivered")
	}
	cp.Send(discoverytest.Delta("v8", "n2", "v7", map[string]*meshdnsv1.NameInfo{"c.demo.svc.cluster.local": {Ips: []string{"10.1.0.3"}}}))
	if ack := cp.Recv(t); ack.GetVersionInfo() != "v8" {
		t.Fatalf("ack = %v", ack)
	}
	eventually(t, "ready", b.Ready)
	if diff := cmp.Diff([]string{"c.demo.svc.cluster.local. A 10.1.0.3"}, answerData(exchange(t, "tcp", b.dns, "c.demo.svc.cluster.local", dns.TypeA))); diff != "" {
		t.Errorf("(-want +got)\n%s", diff)
	}
}

// A version whose settings require a feature the agent does not implement
// is NACKed (InvalidArgument, naming it) and the last good table, with its
// settings, keeps answering.
func TestControlPlaneSettingsRequireUnknownFeature(t *testing.T) {
	up := startUpstream(t)
	cp := discoverytest.Start(t, "127.0.0.1:0", nil)
	a := startAgent(t, Config{ControlPlanes: []string{cp.Addr}, StateDir: t.TempDir(), Upstreams: []string{up.addr}, PodName: "web-0"})
	query := func(name string) *dns.Msg { return exchange(t, "udp", a.dns, name, dns.TypeA) }
	if f := cp.Recv(t).GetIdentity().GetFeatures(); !cmp.Equal(f, ingest.Features, cmpopts.EquateEmpty()) {
		t.Errorf("identity features = %q, want %q", f, ingest.Features)
	}

	v1 := cpTable(map[string]string{"a.demo.svc.cluster.local": "10.1.0.1"})
	v1.Settings = &meshdnsv1.AgentSettings{PodZone: "zone-a"}
	cp.Send(discoverytest.Full("v1", "n1", v1))
	if ack := cp.Recv(t); ack.GetVersionInfo() != "v1" || ack.GetErrorDetail() != nil {
		t.Fatalf("ack = %v", ack)
	}
	v2 := cpTable(map[string]string{"a.demo.svc.cluster.local": "10.1.0.2"})
	v2.Settings = &meshdnsv1.AgentSettings{Requires: []string{"policy", "teleport"}}
	cp.Send(discoverytest.Full("v2", "n2", v2))
	nack := cp.Recv(t)
	if e := nack.GetErrorDetail(); nack.GetVersionInfo() != "v1" || e.GetCode() != 3 || !strings.Contains(e.GetMessage(), `teleport`) || strings.Contains(e.GetMessage(), `policy`) {
		t.Fatalf("nack = %v, want InvalidArgument naming teleport only, keeping v1", nack)
	}
	if diff := cmp.Diff([]string{"a.demo.svc.cluster.local. A 10.1.0.1"}, answerData(query("a.demo.svc.cluster.local"))); diff != "" {
		t.Errorf("after the NACK (-want +got)\n%s", diff)
	}
	cur := a.run.tables.Current()
	if cur.Version != "v1" || cur.AgentSettings() == nil || cur.AgentSettings().PodZone != "zone-a" {
		t.Errorf("served %s with settings %v, want v1 with pod zone zone-a", cur.Version, cur.AgentSettings())
	}
}
