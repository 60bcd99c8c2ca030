package discovery

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"

	"github.com/meshdns/meshdns/agent/discovery/discoverytest"
	"github.com/meshdns/meshdns/internal/namewire"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

func walk(t namewire.RawTable) (map[string]string, []string, error) {
	names := map[string]string{}
	var zones []string
	err := t(func(host, info []byte) error {
		names[string(host)] = string(info)
		return nil
	}, func(z string) error {
		zones = append(zones, z)
		return nil
	})
	return names, zones, err
}

// With a state dir the client keeps no wire form in memory; a rejected
// table leaves the state file as it was (no pending file behind), a delta
// then applies on the table the file holds, and a resumed stream's empty
// delta at the version served is ACKed without a build.
func TestStateDirHoldsTheBase(t *testing.T) {
	dir := t.TempDir()
	srv := discoverytest.Start(t, "127.0.0.1:0", nil)
	rec := &recorder{}
	c := startClient(t, Config{Addrs: []string{srv.Addr}, Apply: rec.apply, StateDir: dir})
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
	if v, _, err := namewire.FileVersion(filepath.Join(dir, stateFile)); v != "v1" || err != nil {
		t.Errorf("state after a rejected table: %q, %v; want v1", v, err)
	}
	// v1 on probation still, the marker naming it again.
	if diff := cmp.Diff([]string{stateFile, markerFile}, dirNames(t, dir)); diff != "" {
		t.Errorf("state dir after a rejected table (-want +got)\n%s", diff)
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
	if v, cur := rec.current(t); v != "v3" || len(cur.GetTable()) != 2 {
		t.Errorf("current = %s %v", v, cur)
	}
}

// A state file the client writes from a delta lists the zones before the
// names (proto puts them after the table), so a restart builds it in one
// pass. (A full table is streamed to the state dir as received.)
func TestStateFileZonesFirst(t *testing.T) {
	dir := t.TempDir()
	srv := discoverytest.Start(t, "127.0.0.1:0", nil)
	startClient(t, Config{Addrs: []string{srv.Addr}, Apply: (&recorder{}).apply, StateDir: dir})
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
	err := namewire.FileTable(filepath.Join(dir, stateFile))(func(_, _ []byte) error {
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

// Every response reaches Apply as the whole table it makes (a delta
// applied to the table before), from the state dir and from memory alike,
// and the version applied walks the same once the next is applied.
func TestVersionsAreWholeTables(t *testing.T) {
	for _, stateDir := range []bool{false, true} {
		t.Run(map[bool]string{false: "memory", true: "state dir"}[stateDir], func(t *testing.T) {
			var applied []*Version
			var walks []string
			cfg := Config{Apply: func(v *Version) error {
				nt, err := namewire.Collect(v.Walk)
				if err != nil {
					return err
				}
				walks = append(walks, v.ID()+" "+describe(nt))
				if len(applied) > 0 {
					prev := applied[len(applied)-1]
					nt, err := namewire.Collect(prev.Walk)
					if err != nil {
						return fmt.Errorf("walk %s while %s is applied: %w", prev.ID(), v.ID(), err)
					}
					walks = append(walks, "  before: "+prev.ID()+" "+describe(nt))
				}
				applied = append(applied, v)
				return nil
			}}
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
			other := delta("v3", "n3", "v2", nil, []string{"c.example"})
			other.GetDelta().AuthoritativeZones = &meshdnsv1.ZoneSet{Zones: []string{"example"}}
			srv.Send(other)
			srv.Recv(t)
			want := []string{
				"v1 [a.example b.example] [cluster.local]",
				"v2 [b.example c.example] [cluster.local]",
				"  before: v1 [a.example b.example] [cluster.local]",
				"v3 [b.example] [example]",
				"  before: v2 [b.example c.example] [cluster.local]",
			}
			if diff := cmp.Diff(want, walks); diff != "" {
				t.Errorf("versions applied (-want +got):\n%s", diff)
			}
			// After the commit of v3 (the state file), v3 still walks.
			nt, err := namewire.Collect(applied[len(applied)-1].Walk)
			if err != nil || describe(nt) != "[b.example] [example]" {
				t.Errorf("v3 walked after its commit: %s, %v", describe(nt), err)
			}
		})
	}
}

// describe is a table's names and zones, sorted.
func describe(nt *namewire.NameTable) string {
	names := slices.Sorted(maps.Keys(nt.Table))
	return fmt.Sprint(names, " ", nt.AuthoritativeZones)
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
	if r.pending == nil || r.Full != nil || !r.IsFull || r.Version != "v1" || r.Nonce != "n1" {
		t.Fatalf("response read as %+v", r)
	}
	gotNames, gotZones, err := walk(r.pending.table())
	if err != nil {
		t.Fatal(err)
	}
	wire, err := proto.Marshal(tbl)
	if err != nil {
		t.Fatal(err)
	}
	wantNames, wantZones, err := walk(namewire.MemTable(wire))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(wantNames, gotNames); diff != "" {
		t.Errorf("pending table's names (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantZones, gotZones); diff != "" {
		t.Errorf("pending table's zones (-want +got):\n%s", diff)
	}
	// The copy noted the table's shape, and a version of it yields the
	// zones first (the table has them last), so a build walks it once;
	// a restart finds the same shape in the file.
	v := &Version{walk: r.pending.table(), shape: r.pending.shape}
	var order []string
	err = v.Walk(func(host, _ []byte) error { order = append(order, string(host)); return nil },
		func(z string) error { order = append(order, "zone "+z); return nil })
	if len(order) == 3 {
		slices.Sort(order[1:]) // proto marshals a map in any order
	}
	if err != nil || v.Names() != 2 || !cmp.Equal(order, []string{"zone cluster.local", "a.example", "b.example"}) {
		t.Errorf("version walks %q (%v) with %d names; want the zone first, then 2 names", order, err, v.Names())
	}
	if version, shape, err := namewire.FileVersion(r.pending.p.Name()); err != nil || version != "v1" || !cmp.Equal(shape, r.pending.shape, cmp.AllowUnexported(namewire.Shape{})) {
		t.Errorf("FileVersion = %q, %+v, %v; want v1 and the shape %+v", version, shape, err, r.pending.shape)
	}
	r.DropFull()
	if _, err := readResponse(bytes.NewReader(b[:len(b)-3]), dir); err == nil {
		t.Error("a cut response was read")
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("state dir holds %d files after a dropped and a cut table, want none", len(ents))
	}
}

// saveState writes the table (wire form) as the state at once.
func saveState(dir, version string, table []byte) error {
	p, err := prepareState(dir, version, len(table), func(w io.Writer) error {
		_, err := w.Write(table)
		return err
	})
	if err != nil {
		return err
	}
	return p.commit()
}
