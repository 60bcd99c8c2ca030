package namewire

import (
	"bufio"
	"bytes"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// copyOf copies table with copyTable, followed by a field of the message
// around it that must still be read after the copy.
func copyOf(t testing.TB, table []byte) ([]byte, *Shape) {
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
	if shape.Names != 3 || !slices.Equal(shape.Zones, nt.AuthoritativeZones) {
		t.Errorf("shape = %d names, zones %q; want 3, %q", shape.Names, shape.Zones, nt.AuthoritativeZones)
	}
	want, err := TableSettings(table)
	if err != nil {
		t.Fatal(err)
	}
	s, err := TableSettings(shape.settings)
	if err != nil || s == nil || s.PodZone != "zone-a" || !slices.Equal(s.Requires, want.Requires) || len(s.Requires) != 1 {
		t.Errorf("shape's settings = %+v, %v; want %+v", s, err, want)
	}
}

// A table that is not well formed is copied as it is, and its shape says
// why, which refuses it (a NACK, and the stream goes on).
func TestCopyTableMalformed(t *testing.T) {
	entry := AppendEntry(nil, []byte("a.example"), nil)
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
			if _, err := shape.TableSettings(); shape.bad == nil || err != shape.bad || !strings.Contains(err.Error(), c.why) {
				t.Errorf("shape = %+v, settings error %v; want one saying %q", shape, err, c.why)
			}
		})
	}
}

// A tag written longer than it needs (valid protobuf) is copied as written.
func TestCopyTableLongVarints(t *testing.T) {
	zone := []byte{0x92, 0x80, 0x00, 0x07} // field 2, bytes, in 3 bytes
	zone = append(zone, "example"...)
	table := append(AppendEntry(nil, []byte("a.example"), nil), zone...)
	got, shape := copyOf(t, table)
	if !bytes.Equal(got, table) {
		t.Fatalf("copy differs from the table")
	}
	if shape.bad != nil || shape.Names != 1 || !slices.Equal(shape.Zones, []string{"example"}) {
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
		err := EachName(table, func(_, _ []byte) error { names++; return nil },
			func(z string) error { zones = append(zones, z); return nil })
		if err != nil {
			return // a malformed entry: the build rejects it
		}
		if names != shape.Names || !slices.Equal(zones, shape.Zones) {
			t.Fatalf("shape = %d names, zones %q; a walk finds %d, %q", shape.Names, shape.Zones, names, zones)
		}
	})
}
