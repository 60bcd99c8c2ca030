package discovery

import (
	"bufio"
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/meshdns/meshdns/agent/discovery/discoverytest"
	"github.com/meshdns/meshdns/internal/namewire"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// copyOf copies table with copyTable, followed by a field of the message
// around it that must still be read after the copy.
func copyOf(t testing.TB, table []byte) ([]byte, *tableShape) {
	t.Helper()
	msg := append(slices.Clone(table), protowire.AppendTag(nil, 9, protowire.VarintType)...)
	msg = protowire.AppendVarint(msg, 7)
	// A small buffer, so fields straddle its end.
	p := &pbReader{r: bufio.NewReaderSize(bytes.NewReader(msg), 16), left: int64(len(msg))}
	var out bytes.Buffer
	shape, err := p.copyTable(&out, uint64(len(table)))
	if err != nil {
		t.Fatalf("copyTable: %v", err)
	}
	if num, _, err := p.tag(); err != nil || num != 9 {
		t.Fatalf("after the table: field %d, %v; want field 9", num, err)
	}
	if v, err := p.varint(); err != nil || v != 7 || p.left != 0 {
		t.Fatalf("after the table: %d, %v, %d left; want 7 and nothing left", v, err, p.left)
	}
	return out.Bytes(), shape
}

// The copy is the table byte for byte, and notes its names, zones and
// settings as a walk of it finds them.
func TestCopyTableShape(t *testing.T) {
	nt := &meshdnsv1.NameTable{
		Table: map[string]*meshdnsv1.NameInfo{
			"a.example": {Ips: []string{"10.0.0.1"}},
			"b.example": {CanonicalName: "x.example"},
			"c.example": {},
		},
		AuthoritativeZones: []string{"example", "cluster.local"},
		Settings:           &meshdnsv1.AgentSettings{PodZone: "zone-a", Requires: []string{"policy"}},
	}
	table, err := proto.MarshalOptions{Deterministic: true}.Marshal(nt)
	if err != nil {
		t.Fatal(err)
	}
	got, shape := copyOf(t, table)
	if !bytes.Equal(got, table) {
		t.Fatalf("copy differs from the table")
	}
	if shape.bad != nil {
		t.Fatalf("a well-formed table is bad: %v", shape.bad)
	}
	if shape.names != 3 || !slices.Equal(shape.zones, nt.AuthoritativeZones) {
		t.Errorf("shape = %d names, zones %q; want 3, %q", shape.names, shape.zones, nt.AuthoritativeZones)
	}
	want, err := namewire.TableSettings(table)
	if err != nil {
		t.Fatal(err)
	}
	s, err := namewire.TableSettings(shape.settings)
	if err != nil || s == nil || s.PodZone != "zone-a" || !slices.Equal(s.Requires, want.Requires) || len(s.Requires) != 1 {
		t.Errorf("shape's settings = %+v, %v; want %+v", s, err, want)
	}
}

// A table that is not well formed is copied as it is, and its shape says
// why, which refuses it (a NACK, and the stream goes on).
func TestCopyTableMalformed(t *testing.T) {
	entry := namewire.AppendEntry(nil, []byte("a.example"), nil)
	for _, c := range []struct {
		name, why string
		table     []byte
	}{
		{"length past the table", "field 1: truncated", append(slices.Clone(entry), 0x0a, 0x7f, 'x')},
		{"group wire type", "field 1: unsupported wire type 3", append(slices.Clone(entry), 0x0b)},
		{"field number 0", "field tag: ", append(slices.Clone(entry), 0x02, 0x00)},
		{"truncated varint", "field 1: truncated", append(slices.Clone(entry), 0x08, 0x80)},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, shape := copyOf(t, c.table)
			if !bytes.Equal(got, c.table) {
				t.Errorf("copy differs from the table")
			}
			if _, err := shape.tableSettings(); shape.bad == nil || err != shape.bad || !strings.Contains(err.Error(), c.why) {
				t.Errorf("shape = %+v, settings error %v; want one saying %q", shape, err, c.why)
			}
		})
	}
}

// A tag written longer than it needs (valid protobuf) is copied as written.
func TestCopyTableLongVarints(t *testing.T) {
	zone := []byte{0x92, 0x80, 0x00, 0x07} // field 2, bytes, in 3 bytes
	zone = append(zone, "example"...)
	table := append(namewire.AppendEntry(nil, []byte("a.example"), nil), zone...)
	got, shape := copyOf(t, table)
	if !bytes.Equal(got, table) {
		t.Fatalf("copy differs from the table")
	}
	if shape.bad != nil || shape.names != 1 || !slices.Equal(shape.zones, []string{"example"}) {
		t.Errorf("shape = %+v; want 1 name, zone example", shape)
	}
}

// Whatever the bytes, the copy is them, and a shape agrees with a walk.
func FuzzCopyTable(f *testing.F) {
	nt, _ := proto.Marshal(&meshdnsv1.NameTable{Table: map[string]*meshdnsv1.NameInfo{"a.example": {Ips: []string{"10.0.0.1"}}},
		AuthoritativeZones: []string{"example"}})
	f.Add(nt)
	f.Add([]byte{0x0a, 0x00, 0x12, 0x01, 'x', 0x1a, 0x00})
	f.Fuzz(func(t *testing.T, table []byte) {
		got, shape := copyOf(t, table)
		if !bytes.Equal(got, table) {
			t.Fatalf("copy differs from the table")
		}
		if shape.bad != nil {
			return
		}
		names := 0
		var zones []string
		err := namewire.EachName(table, func(_, _ []byte) error { names++; return nil },
			func(z string) error { zones = append(zones, z); return nil })
		if err != nil {
			return // a malformed entry: the build rejects it
		}
		if names != shape.names || !slices.Equal(zones, shape.zones) {
			t.Fatalf("shape = %d names, zones %q; a walk finds %d, %q", shape.names, shape.zones, names, zones)
		}
	})
}

// A full table that is not well formed is refused as it is received, with
// why (NACK), before a build; the stream goes on, the table applied stays,
// and the next good one is applied.
func TestMalformedFullTableNacked(t *testing.T) {
	srv := discoverytest.Start(t, "127.0.0.1:0", nil)
	rec := &recorder{}
	startClient(t, Config{Addrs: []string{srv.Addr}, Apply: rec.apply, StateDir: t.TempDir()})
	srv.Recv(t)
	srv.Send(full("v1", "n1", table("a.example")))
	if got := srv.Recv(t); got.GetVersionInfo() != "v1" || got.GetErrorDetail() != nil {
		t.Fatalf("ack v1 = %v", got)
	}
	bad := table("b.example")
	bad.ProtoReflect().SetUnknown([]byte{0x0b}) // field 1 as a group: no NameTable holds that
	srv.Send(full("v2", "n2", bad))
	got := srv.Recv(t)
	if got.GetVersionInfo() != "v1" || got.GetResponseNonce() != "n2" || !strings.Contains(got.GetErrorDetail().GetMessage(), "unsupported wire type") {
		t.Fatalf("answer to a malformed table = %v; want a NACK keeping v1 that says why", got)
	}
	srv.Send(full("v3", "n3", table("c.example")))
	if got := srv.Recv(t); got.GetVersionInfo() != "v3" || got.GetErrorDetail() != nil {
		t.Fatalf("ack v3 = %v", got)
	}
	if diff := cmp.Diff([]string{"v1", "v3"}, rec.versions); diff != "" {
		t.Errorf("applied versions (-want +got):\n%s", diff)
	}
}
