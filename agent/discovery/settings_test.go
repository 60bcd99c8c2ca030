package discovery

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"

	"github.com/meshdns/meshdns/agent/discovery/discoverytest"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// zoneOf is the pod zone of the settings of the version last applied, or
// "-" for none.
func (r *recorder) zoneOf() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s := r.lastV.Settings(); s != nil {
		return s.PodZone
	}
	return "-"
}

// Settings travel with the version over a real stream: a full table's are
// applied with it, a delta without settings keeps them, one with settings
// replaces them, a version requiring a feature the agent does not
// implement is NACKed with the previous one kept, and (with a state dir)
// a restarted agent has them before it reconnects.
func TestSettings(t *testing.T) {
	for _, stateDir := range []bool{false, true} {
		name := "memory"
		if stateDir {
			name = "statedir"
		}
		t.Run(name, func(t *testing.T) { testSettings(t, stateDir) })
	}
}

func testSettings(t *testing.T, stateDir bool) {
	dir := ""
	if stateDir {
		dir = t.TempDir()
	}
	srv := discoverytest.Start(t, "127.0.0.1:0", nil)
	rec := &recorder{}
	ctx, cancel := context.WithCancel(context.Background())
	c := newClient(t, Config{Addrs: []string{srv.Addr}, Apply: rec.apply, StateDir: dir, Features: []string{"zones"}})
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() { cancel(); <-done }()

	if f := srv.Recv(t).GetIdentity().GetFeatures(); !cmp.Equal(f, []string{"zones"}) {
		t.Errorf("identity features = %q, want [zones]", f)
	}
	ack := func(what, version string) {
		t.Helper()
		if a := srv.Recv(t); a.GetVersionInfo() != version || a.GetErrorDetail() != nil {
			t.Fatalf("%s: got %v, want an ACK of %s", what, a, version)
		}
	}
	nack := func(what, keep string) {
		t.Helper()
		a := srv.Recv(t)
		e := a.GetErrorDetail()
		if a.GetVersionInfo() != keep || codes.Code(e.GetCode()) != codes.InvalidArgument || !strings.Contains(e.GetMessage(), "policy") {
			t.Fatalf("%s: got %v, want a NACK (InvalidArgument, naming policy) keeping %s", what, a, keep)
		}
	}
	zone := func(what, want string) {
		t.Helper()
		if got := rec.zoneOf(); got != want {
			t.Errorf("%s: pod zone of the version applied = %q, want %q", what, got, want)
		}
	}

	v1 := table("a.example")
	v1.Settings = &meshdnsv1.AgentSettings{PodZone: "z1", Requires: []string{"zones"}}
	srv.Send(full("v1", "n1", v1))
	ack("full v1", "v1")
	zone("full v1", "z1")

	bad := table("a.example", "b.example")
	bad.Settings = &meshdnsv1.AgentSettings{Requires: []string{"zones", "policy"}}
	srv.Send(full("v2", "n2", bad))
	nack("full v2 requiring policy", "v1")
	if v, cur := rec.current(t); v != "v1" || len(cur.GetTable()) != 1 {
		t.Errorf("after the NACK the agent serves %s %v, want v1", v, cur)
	}
	zone("after the NACK of v2", "z1")

	if stateDir {
		// The state file keeps the base: deltas apply to v1.
		srv.Send(delta("v3", "n3", "v1", []string{"c.example"}, nil))
	} else {
		// In memory the base was dropped by the rejected build: a full
		// table again, then a delta on it.
		srv.Send(full("v1", "n3", v1))
		ack("v1 again", "v1")
		srv.Send(delta("v3", "n3b", "v1", []string{"c.example"}, nil))
	}
	ack("delta v3 without settings", "v3")
	zone("delta v3 without settings", "z1")

	d := delta("v4", "n4", "v3", []string{"d.example"}, nil)
	d.GetDelta().Settings = &meshdnsv1.AgentSettings{PodZone: "z2"}
	srv.Send(d)
	ack("delta v4 with settings", "v4")
	zone("delta v4 with settings", "z2")

	d = delta("v5", "n5", "v4", []string{"e.example"}, nil)
	d.GetDelta().Settings = &meshdnsv1.AgentSettings{Requires: []string{"policy"}}
	srv.Send(d)
	nack("delta v5 requiring policy", "v4")
	zone("after the NACK of v5", "z2")
	if diff := cmp.Diff([]string{"a.example", "c.example", "d.example"}, rec.names()); diff != "" {
		t.Errorf("names served (-want +got)\n%s", diff)
	}

	d = delta("v6", "n6", "v4", []string{"f.example"}, nil)
	srv.Send(d)
	ack("delta v6 without settings", "v6")
	zone("delta v6 without settings", "z2")
	if !stateDir {
		return
	}
	cancel()
	<-done
	done <- nil

	// A new agent process restores v6 with its settings, no control
	// plane reachable.
	rec2 := &recorder{}
	c2 := newClient(t, Config{Addrs: []string{deadAddr(t)}, Apply: rec2.apply, StateDir: dir, Features: []string{"zones"}})
	if ok, err := c2.Restore(); !ok || err != nil {
		t.Fatalf("Restore = %v, %v", ok, err)
	}
	if got := rec2.zoneOf(); got != "z2" {
		t.Errorf("restored pod zone = %q, want z2", got)
	}
}
