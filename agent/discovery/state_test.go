package discovery

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/protobuf/proto"

	"github.com/meshdns/meshdns/agent/discovery/discoverytest"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// walked is what a walk of a WireTable saw.
type walked struct {
	Names map[string]string // host -> its NameInfo, marshalled
	Zones []string
}

func walk(t WireTable) (walked, error) {
	w := walked{Names: map[string]string{}}
	err := t(func(host string, info []byte) error {
		w.Names[host] = string(info)
		return nil
	}, func(z string) error {
		w.Zones = append(w.Zones, z)
		return nil
	})
	return w, err
}

// The state file's table, streamed from disk, walks exactly as the same
// bytes in memory; a cut file fails instead of yielding half a table.
func TestFileTableWalksAsMemory(t *testing.T) {
	nt := table("a.example", "b.example", "c.example")
	nt.Table["d.example"] = &meshdnsv1.NameInfo{Ports: []*meshdnsv1.Port{{Name: "http", Port: 80}}, Ttl: 7}
	wire, err := proto.Marshal(nt)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := saveState(dir, "v1", wire); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, stateFile)
	want, err := walk(memTable(wire))
	if err != nil {
		t.Fatal(err)
	}
	got, err := walk(fileTable(path))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("file walk (-memory +file):\n%s", diff)
	}
	if len(got.Names) != 4 || len(got.Zones) != 1 {
		t.Errorf("walked %d names and %d zones, want 4 and 1", len(got.Names), len(got.Zones))
	}
	if v, err := stateVersion(path); v != "v1" || err != nil {
		t.Errorf("stateVersion = %q, %v; want v1", v, err)
	}

	full, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cut := filepath.Join(dir, "cut.pb")
	if err := os.WriteFile(cut, full[:len(full)-5], 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := walk(fileTable(cut)); err == nil {
		t.Error("walk of a cut state file: no error")
	}
	// The version alone, without a table, is no state.
	noTable := filepath.Join(dir, "notable.pb")
	if err := os.WriteFile(noTable, full[:4], 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := stateVersion(noTable); !errors.Is(err, errNoTable) {
		t.Errorf("stateVersion of a file without a table: %v, want errNoTable", err)
	}
}

// With a state dir the client keeps no wire form in memory; a rejected
// table leaves the state file as it was (no pending file behind), a delta
// then applies on the table the file holds, and a resumed stream's empty
// delta at the version served is ACKed without a build.
func TestStateDirHoldsTheBase(t *testing.T) {
	dir := t.TempDir()
	srv := discoverytest.Start(t, "127.0.0.1:0", nil)
	rec := &recorder{}
	c := startClient(t, Config{Addrs: []string{srv.Addr}, OnTable: rec.onTable, StateDir: dir})
	srv.Recv(t)
	srv.Send(full("v1", "n1", table("a.example", "b.example")))
	if ack := srv.Recv(t); ack.GetVersionInfo() != "v1" || ack.GetErrorDetail() != nil {
		t.Fatalf("ack of v1 = %v", ack)
	}
	c.mu.Lock()
	wire, onDisk := c.wire, c.onDisk
	c.mu.Unlock()
	if wire != nil || !onDisk {
		t.Errorf("after v1: %d bytes in memory, on disk %v; want none, true", len(wire), onDisk)
	}

	srv.Send(full("v2", "n2", table("bad.example")))
	if ack := srv.Recv(t); ack.GetErrorDetail() == nil || ack.GetVersionInfo() != "v1" {
		t.Fatalf("reply to an invalid table = %v, want a NACK keeping v1", ack)
	}
	if v, err := stateVersion(filepath.Join(dir, stateFile)); v != "v1" || err != nil {
		t.Errorf("state after a rejected table: %q, %v; want v1", v, err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 {
		t.Errorf("state dir holds %d files, want only %s", len(ents), stateFile)
	}

	srv.Send(delta("v3", "n3", "v1", []string{"c.example"}, []string{"a.example"}))
	if ack := srv.Recv(t); ack.GetVersionInfo() != "v3" || ack.GetErrorDetail() != nil {
		t.Fatalf("ack of delta v3 = %v", ack)
	}
	if diff := cmp.Diff([]string{"b.example", "c.example"}, rec.names()); diff != "" {
		t.Errorf("names after the delta (-want +got)\n%s", diff)
	}
	applied := len(rec.versions)
	srv.Send(delta("v3", "n4", "v3", nil, nil))
	if ack := srv.Recv(t); ack.GetVersionInfo() != "v3" || ack.GetErrorDetail() != nil {
		t.Fatalf("ack of the empty delta = %v", ack)
	}
	if len(rec.versions) != applied {
		t.Errorf("an empty delta at the served version was built again: versions %v", rec.versions)
	}
	if v, cur := c.Current(); v != "v3" || len(cur.Table) != 2 {
		t.Errorf("Current() = %s %v", v, cur)
	}
}

// A state file the client writes from a delta lists the zones before the
// names (proto puts them after the table), so a restart builds it in one
// pass. (A full table is streamed to the state dir as received.)
func TestStateFileZonesFirst(t *testing.T) {
	dir := t.TempDir()
	srv := discoverytest.Start(t, "127.0.0.1:0", nil)
	startClient(t, Config{Addrs: []string{srv.Addr}, OnTable: (&recorder{}).onTable, StateDir: dir})
	srv.Recv(t)
	srv.Send(full("v1", "n1", table("a.example")))
	if ack := srv.Recv(t); ack.GetVersionInfo() != "v1" {
		t.Fatalf("ack = %v", ack)
	}
	srv.Send(delta("v2", "n2", "v1", []string{"b.example"}, nil))
	if ack := srv.Recv(t); ack.GetVersionInfo() != "v2" {
		t.Fatalf("ack = %v", ack)
	}
	var order []string
	err := fileTable(filepath.Join(dir, stateFile))(func(host string, _ []byte) error {
		order = append(order, "name")
		return nil
	}, func(z string) error {
		order = append(order, "zone "+z)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"zone cluster.local", "name", "name"}, order); diff != "" {
		t.Errorf("state file order (-want +got):\n%s", diff)
	}
}

// With OnWireDelta a delta arrives as what it changes (the base's old
// entries of the names it removes or replaces, the new ones, whether the
// zones change) beside the whole next table, from the state dir and from
// memory alike.
func TestOnWireDelta(t *testing.T) {
	for _, stateDir := range []bool{false, true} {
		t.Run(map[bool]string{false: "memory", true: "state dir"}[stateDir], func(t *testing.T) {
			type got struct {
				Old, New, Next []string
				ZonesChanged   bool
			}
			var gots []got
			cfg := Config{
				Addrs:       nil,
				OnWireTable: func(string, WireTable) error { return nil },
				OnWireDelta: func(version string, next WireTable, change func() (Change, bool, error)) error {
					c, ok, err := change()
					if err != nil || !ok {
						return fmt.Errorf("change: %v, %v", ok, err)
					}
					var g got
					if err := c.Old(func(host string, _ []byte) error { g.Old = append(g.Old, strings.Clone(host)); return nil }); err != nil {
						return err
					}
					for _, n := range c.New {
						g.New = append(g.New, n.Host)
					}
					w, err := walk(next)
					if err != nil {
						return err
					}
					for h := range w.Names {
						g.Next = append(g.Next, h)
					}
					slices.Sort(g.Old)
					slices.Sort(g.New)
					slices.Sort(g.Next)
					g.ZonesChanged = c.ZonesChanged
					gots = append(gots, g)
					return nil
				},
			}
			if stateDir {
				cfg.StateDir = t.TempDir()
			}
			srv := discoverytest.Start(t, "127.0.0.1:0", nil)
			cfg.Addrs = []string{srv.Addr}
			startClient(t, cfg)
			srv.Recv(t)
			srv.Send(full("v1", "n1", table("a.example", "b.example")))
			srv.Recv(t)
			srv.Send(delta("v2", "n2", "v1", []string{"b.example", "c.example"}, []string{"a.example", "missing.example"}))
			if ack := srv.Recv(t); ack.GetVersionInfo() != "v2" || ack.GetErrorDetail() != nil {
				t.Fatalf("ack of v2 = %v", ack)
			}
			same := delta("v3", "n3", "v2", nil, []string{"c.example"})
			same.GetDelta().AuthoritativeZones = &meshdnsv1.ZoneSet{Zones: []string{"cluster.local"}}
			srv.Send(same)
			srv.Recv(t)
			other := delta("v4", "n4", "v3", nil, nil)
			other.GetDelta().AuthoritativeZones = &meshdnsv1.ZoneSet{Zones: []string{"example"}}
			srv.Send(other)
			srv.Recv(t)
			want := []got{
				{Old: []string{"a.example", "b.example"}, New: []string{"b.example", "c.example"}, Next: []string{"b.example", "c.example"}},
				{Old: []string{"c.example"}, Next: []string{"b.example"}},
				{Next: []string{"b.example"}, ZonesChanged: true},
			}
			if diff := cmp.Diff(want, gots, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("deltas (-want +got):\n%s", diff)
			}
		})
	}
}

// A full table that changes little of the one applied (a control plane
// that did not know our version resends it whole) arrives as a change;
// one that changes much of it as a change to apply in stages (Next walks
// what it adds or replaces), one that changes its zones as a whole table.
func TestFullTableAsChange(t *testing.T) {
	for _, stateDir := range []bool{false, true} {
		t.Run(map[bool]string{false: "memory", true: "state dir"}[stateDir], func(t *testing.T) {
			var events []string
			cfg := Config{
				OnWireTable: func(version string, _ WireTable) error {
					events = append(events, version+" whole")
					return nil
				},
				OnWireDelta: func(version string, _ WireTable, change func() (Change, bool, error)) error {
					c, ok, err := change()
					if err != nil {
						return err
					}
					if !ok {
						events = append(events, version+" whole")
						return nil
					}
					var old, added []string
					if err := c.Old(func(host string, _ []byte) error { old = append(old, strings.Clone(host)); return nil }); err != nil {
						return err
					}
					for _, n := range c.New {
						added = append(added, n.Host)
					}
					kind := "change"
					if c.Next != nil {
						kind = "staged change"
						if len(c.New) > 0 {
							return errors.New("a staged change with New")
						}
						// Walked twice, as the stages do.
						for range 2 {
							added = added[:0]
							if err := c.Next(func(host string, _ []byte) error { added = append(added, strings.Clone(host)); return nil }); err != nil {
								return err
							}
						}
					}
					slices.Sort(old)
					slices.Sort(added)
					events = append(events, fmt.Sprintf("%s %s -%v +%v", version, kind, old, added))
					return nil
				},
			}
			if stateDir {
				cfg.StateDir = t.TempDir()
			}
			srv := discoverytest.Start(t, "127.0.0.1:0", nil)
			cfg.Addrs = []string{srv.Addr}
			startClient(t, cfg)
			srv.Recv(t)
			var names []string
			for i := range 12 {
				names = append(names, fmt.Sprintf("n%d.example", i))
			}
			srv.Send(full("v1", "n1", table(names...)))
			srv.Recv(t)
			// One name moves, one goes, one comes: 3 of 12.
			v2 := table(append(names[2:], "new.example")...)
			v2.Table["n2.example"].Ips = []string{"10.0.0.9"}
			srv.Send(full("v2", "n2", v2))
			srv.Recv(t)
			srv.Send(full("v3", "n3", table("x.example", "y.example")))
			srv.Recv(t)
			other := table("x.example", "y.example")
			other.AuthoritativeZones = []string{"example"}
			srv.Send(full("v4", "n4", other))
			srv.Recv(t)
			want := []string{
				"v1 whole",
				"v2 change -[n0.example n1.example n2.example] +[n2.example new.example]",
				"v3 staged change -[n10.example n11.example n2.example n3.example n4.example n5.example n6.example n7.example n8.example n9.example new.example] +[x.example y.example]",
				"v4 whole",
			}
			if diff := cmp.Diff(want, events); diff != "" {
				t.Errorf("applied (-want +got):\n%s", diff)
			}
		})
	}
}

// With a state dir a full table is copied from the response into a pending
// state file, not into memory; a response cut inside the table leaves no
// file behind.
func TestReadResponseToStateDir(t *testing.T) {
	dir := t.TempDir()
	tbl := table("a.example", "b.example")
	b, err := proto.Marshal(full("v1", "n1", tbl))
	if err != nil {
		t.Fatal(err)
	}
	r, err := readResponse(bytes.NewReader(b), dir)
	if err != nil {
		t.Fatal(err)
	}
	if r.pending == nil || r.full != nil || !r.isFull || r.version != "v1" || r.nonce != "n1" {
		t.Fatalf("response read as %+v", r)
	}
	got, err := walk(r.pending.table().wire())
	if err != nil {
		t.Fatal(err)
	}
	wire, err := proto.Marshal(tbl)
	if err != nil {
		t.Fatal(err)
	}
	want, err := walk(memTable(wire))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("pending table (-want +got):\n%s", diff)
	}
	r.dropFull()
	if _, err := readResponse(bytes.NewReader(b[:len(b)-3]), dir); err == nil {
		t.Error("a cut response was read")
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("state dir holds %d files after a dropped and a cut table, want none", len(ents))
	}
}
