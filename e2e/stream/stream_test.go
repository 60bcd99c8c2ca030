package stream

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// Control planes and agents must stop every goroutine they started.
	// gRPC's callback serializer goroutines end just after Close returns.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"))
}

const zone = "corp.example"

// TestFailover: the agent streams from the first control plane, fails over
// to the second when the first stops, and keeps serving its last table
// while neither is reachable until one comes back.
func TestFailover(t *testing.T) {
	dir := t.TempDir()
	const name = "api.corp.example"
	writeFile(t, dir, "names.yaml", entries(zone, name+" 10.1.0.1"))
	up := startUpstream(t)
	cp1 := startControlPlane(t, dir, "")
	cp2 := startControlPlane(t, dir, "")
	a := startAgent(t, agentOptions{namespace: "team-a", controlPlanes: []string{cp1.grpc, cp2.grpc},
		upstream: up.addr, stateDir: t.TempDir()})

	a.await(t, name, "NOERROR A 10.1.0.1")
	a.awaitControlPlane(t, cp1.grpc) // the first address of the list wins

	// Both control planes read the folder; only the second is there to
	// tell the agent about the change.
	cp1.stop()
	writeFile(t, dir, "names.yaml", entries(zone, name+" 10.1.0.2"))
	a.await(t, name, "NOERROR A 10.1.0.2")
	a.awaitControlPlane(t, cp2.grpc)

	cp2.stop()
	a.awaitControlPlane(t, "") // the agent saw its stream end: no control plane is reachable
	for range 5 {
		if got := a.answerA(t, name); got != "NOERROR A 10.1.0.2" {
			t.Fatalf("without a control plane: %s A = %q, want the last table's %q", name, got, "NOERROR A 10.1.0.2")
		}
	}
	if got := a.answerA(t, "nosuch.corp.example"); got != "NXDOMAIN" {
		t.Errorf("without a control plane: nosuch.corp.example A = %q, want NXDOMAIN (the zone still serves)", got)
	}
	if n := up.asked("nosuch.corp.example"); n != 0 {
		t.Errorf("upstream asked %d times for a name in the table's zone", n)
	}

	// The first control plane comes back on its address with the folder
	// changed meanwhile; the agent reconnects after its backoff.
	writeFile(t, dir, "names.yaml", entries(zone, name+" 10.1.0.3"))
	startControlPlane(t, dir, cp1.grpc)
	a.await(t, name, "NOERROR A 10.1.0.3")
	a.awaitControlPlane(t, cp1.grpc)
}

// TestRestartFromState: an agent restarted with the same --state-dir while
// no control plane is reachable answers its last table at once; it turns
// ready after --ready-grace, or earlier when a stream delivers a table
// (agent/README.md, Readiness).
func TestRestartFromState(t *testing.T) {
	dir, state := t.TempDir(), t.TempDir()
	const name = "api.corp.example"
	writeFile(t, dir, "names.yaml", entries(zone, name+" 10.2.0.1"))
	up := startUpstream(t)
	cp1 := startControlPlane(t, dir, "")
	cp2 := startControlPlane(t, dir, "")
	cps := []string{cp1.grpc, cp2.grpc}
	a := startAgent(t, agentOptions{namespace: "team-a", controlPlanes: cps, upstream: up.addr, stateDir: state})
	a.await(t, name, "NOERROR A 10.2.0.1")
	poll(t, func() bool { return a.metric(t, "meshdns_discovery_state_writes_total", `result="ok"`) >= 1 },
		func() string { return "the agent persisted no table" })
	a.stop()
	cp1.stop()
	cp2.stop()

	t.Run("ready after the grace period", func(t *testing.T) {
		const grace = 2 * time.Second
		start := time.Now()
		b := startAgent(t, agentOptions{namespace: "team-a", controlPlanes: cps, upstream: up.addr, stateDir: state,
			readyGrace: grace})
		// One question, no polling: the restored table serves from the start.
		if got := b.answerA(t, name); got != "NOERROR A 10.2.0.1" {
			t.Fatalf("restarted agent: %s A = %q, want the persisted %q", name, got, "NOERROR A 10.2.0.1")
		}
		code, body := b.ready(t)
		// The grace timer starts after start, so a reply that came back
		// before start+grace was computed before the grace ended.
		if time.Since(start) < grace && code != http.StatusServiceUnavailable {
			t.Errorf("ready within the grace period with no control plane: %d %q", code, body)
		}
		poll(t, func() bool { code, body = b.ready(t); return code == http.StatusOK },
			func() string { return "never ready after the grace period" })
		if d := time.Since(start); d < grace {
			t.Errorf("ready after %v, before the grace period of %v", d, grace)
		}
		if !strings.Contains(body, "from state") {
			t.Errorf("/healthz/ready = %q, want the restored table (from state)", body)
		}
		if got := b.answerA(t, name); got != "NOERROR A 10.2.0.1" {
			t.Errorf("after the grace period: %s A = %q, want %q", name, got, "NOERROR A 10.2.0.1")
		}
		b.stop()
	})

	t.Run("ready when the stream is back", func(t *testing.T) {
		b := startAgent(t, agentOptions{namespace: "team-a", controlPlanes: cps, upstream: up.addr, stateDir: state,
			readyGrace: time.Hour})
		if got := b.answerA(t, name); got != "NOERROR A 10.2.0.1" {
			t.Fatalf("restarted agent: %s A = %q, want the persisted %q", name, got, "NOERROR A 10.2.0.1")
		}
		if code, body := b.ready(t); code != http.StatusServiceUnavailable {
			t.Errorf("ready with no control plane and an hour of grace: %d %q", code, body)
		}
		// The second address of the list comes back, with a changed folder.
		writeFile(t, dir, "names.yaml", entries(zone, name+" 10.2.0.2"))
		startControlPlane(t, dir, cp2.grpc)
		b.await(t, name, "NOERROR A 10.2.0.2")
		var code int
		var body string
		poll(t, func() bool { code, body = b.ready(t); return code == http.StatusOK },
			func() string { return "not ready after the stream delivered a table" })
		if !strings.Contains(body, "from controlplane") {
			t.Errorf("/healthz/ready = %q, want the streamed table (from controlplane)", body)
		}
	})
}

// TestBadEntriesFile: a rejected entries file leaves the control planes on
// its last good entries, the agent keeps answering them, and
// meshdns_controlplane_file_reload_errors_total counts each rejection.
func TestBadEntriesFile(t *testing.T) {
	dir := t.TempDir()
	const name = "api.corp.example"
	writeFile(t, dir, "names.yaml", entries(zone, name+" 10.3.0.1"))
	up := startUpstream(t)
	cp1 := startControlPlane(t, dir, "")
	cp2 := startControlPlane(t, dir, "")
	a := startAgent(t, agentOptions{namespace: "team-a", controlPlanes: []string{cp1.grpc, cp2.grpc}, upstream: up.addr})
	a.await(t, name, "NOERROR A 10.3.0.1")

	const reloadErrors = "meshdns_controlplane_file_reload_errors_total"
	tests := []struct {
		name    string
		content string
	}{
		{name: "not YAML", content: "zones: [corp.example\nentries:\n  - hostname: {\n"},
		{name: "invalid address", content: entries(zone, name+" 10.3.0")},
		{name: "unknown field", content: "entries:\n  - hostname: " + name + "\n    adresses: [\"10.3.0.9\"]\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := []float64{cp1.metric(t, reloadErrors), cp2.metric(t, reloadErrors)}
			writeFile(t, dir, "names.yaml", tt.content)
			for i, cp := range []*controlPlane{cp1, cp2} {
				var got float64
				poll(t, func() bool { got = cp.metric(t, reloadErrors); return got > before[i] },
					func() string { return cp.grpc + ": " + reloadErrors + " did not go up" })
			}
			// Both control planes have processed the bad file; had either
			// dropped the entries, a new version would be on its way.
			for range 5 {
				if got := a.answerA(t, name); got != "NOERROR A 10.3.0.1" {
					t.Fatalf("after a bad file: %s A = %q, want the last good %q", name, got, "NOERROR A 10.3.0.1")
				}
			}
		})
	}
	// A good file again is served.
	writeFile(t, dir, "names.yaml", entries(zone, name+" 10.3.0.2"))
	a.await(t, name, "NOERROR A 10.3.0.2")
}

// TestNamespaceScoping: an entry for team-a is answered in team-a; in
// team-b it is NXDOMAIN inside an authoritative zone (the upstream never
// hears of it) and forwarded outside one.
func TestNamespaceScoping(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "names.yaml", entries(zone,
		"open.corp.example 10.4.0.1",
		"secret.corp.example 10.4.0.2 team-a",
		"secret.example.net 10.4.0.3 team-a",
	))
	up := startUpstream(t)
	cp1 := startControlPlane(t, dir, "")
	cp2 := startControlPlane(t, dir, "")
	agents := map[string]*testAgent{
		"team-a": startAgent(t, agentOptions{namespace: "team-a", controlPlanes: []string{cp1.grpc, cp2.grpc}, upstream: up.addr}),
		"team-b": startAgent(t, agentOptions{namespace: "team-b", controlPlanes: []string{cp2.grpc, cp1.grpc}, upstream: up.addr}),
	}
	for _, a := range agents {
		a.await(t, "open.corp.example", "NOERROR A 10.4.0.1")
	}

	tests := []struct {
		name      string
		namespace string
		qname     string
		want      string
		forwarded bool // the upstream gets the question
	}{
		{name: "open entry in team-a", namespace: "team-a", qname: "open.corp.example", want: "NOERROR A 10.4.0.1"},
		{name: "open entry in team-b", namespace: "team-b", qname: "open.corp.example", want: "NOERROR A 10.4.0.1"},
		{name: "scoped entry in its namespace", namespace: "team-a", qname: "secret.corp.example", want: "NOERROR A 10.4.0.2"},
		{name: "scoped entry in another namespace, inside the zone", namespace: "team-b", qname: "secret.corp.example",
			want: "NXDOMAIN"},
		{name: "scoped entry outside a zone, in its namespace", namespace: "team-a", qname: "secret.example.net",
			want: "NOERROR A 10.4.0.3"},
		{name: "scoped entry outside a zone, in another namespace", namespace: "team-b", qname: "secret.example.net",
			want: "NOERROR A " + upstreamIP, forwarded: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := up.asked(tt.qname)
			if got := agents[tt.namespace].answerA(t, tt.qname); got != tt.want {
				t.Errorf("%s: %s A = %q, want %q", tt.namespace, tt.qname, got, tt.want)
			}
			if n := up.asked(tt.qname) - before; (n > 0) != tt.forwarded {
				t.Errorf("%s: %s: upstream asked %d times, want forwarded=%v", tt.namespace, tt.qname, n, tt.forwarded)
			}
		})
	}
}
