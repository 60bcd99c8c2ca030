package namewire_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/meshdns/meshdns/internal/namewire"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// A delta applied in wire form gives the table the same delta applied to
// decoded messages would.
func TestApplyDelta(t *testing.T) {
	base := &meshdnsv1.NameTable{
		AuthoritativeZones: []string{"cluster.local"},
		Table: map[string]*meshdnsv1.NameInfo{
			"a.example": {Ips: []string{"10.0.0.1"}},
			"b.example": {Ips: []string{"10.0.0.2"}, Ports: []*meshdnsv1.Port{{Name: "http", Port: 80}}},
			"c.example": {CanonicalName: "x.example"},
			"e.example": {},
		},
	}
	tests := []struct {
		name  string
		delta *meshdnsv1.NameTableDelta
		want  *meshdnsv1.NameTable
	}{
		{
			name:  "empty",
			delta: &meshdnsv1.NameTableDelta{},
			want:  base,
		},
		{
			name: "upsert, replace and remove",
			delta: &meshdnsv1.NameTableDelta{
				Upserted: map[string]*meshdnsv1.NameInfo{"a.example": {Ips: []string{"10.0.0.9"}}, "d.example": {Ips: []string{"fd00::1"}}},
				Removed:  []string{"c.example", "missing.example"},
			},
			want: &meshdnsv1.NameTable{
				AuthoritativeZones: []string{"cluster.local"},
				Table: map[string]*meshdnsv1.NameInfo{
					"a.example": {Ips: []string{"10.0.0.9"}},
					"b.example": base.Table["b.example"],
					"d.example": {Ips: []string{"fd00::1"}},
					"e.example": {},
				},
			},
		},
		{
			name:  "new zones",
			delta: &meshdnsv1.NameTableDelta{AuthoritativeZones: &meshdnsv1.ZoneSet{Zones: []string{"example", "cluster.local"}}},
			want:  &meshdnsv1.NameTable{AuthoritativeZones: []string{"example", "cluster.local"}, Table: base.Table},
		},
		{
			name:  "zones emptied",
			delta: &meshdnsv1.NameTableDelta{AuthoritativeZones: &meshdnsv1.ZoneSet{}},
			want:  &meshdnsv1.NameTable{Table: base.Table},
		},
	}
	wire, err := proto.Marshal(base)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := proto.Marshal(tt.delta)
			if err != nil {
				t.Fatal(err)
			}
			d, err := namewire.UnmarshalDelta(b)
			if err != nil {
				t.Fatal(err)
			}
			out, err := namewire.ApplyDelta(wire, d)
			if err != nil {
				t.Fatal(err)
			}
			got := new(meshdnsv1.NameTable)
			if err := proto.Unmarshal(out, got); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got, protocmp.Transform()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// A raw response parses to what proto would decode, with the full table
// left in wire form.
func TestParseResponse(t *testing.T) {
	tbl := &meshdnsv1.NameTable{Table: map[string]*meshdnsv1.NameInfo{"a.example": {Ips: []string{"10.0.0.1"}}}}
	fullResp, err := proto.Marshal(fullResponse("v1", "n1", tbl))
	if err != nil {
		t.Fatal(err)
	}
	r, err := readResponse(fullResp)
	if err != nil {
		t.Fatal(err)
	}
	got := new(meshdnsv1.NameTable)
	if err := proto.Unmarshal(r.Full, got); err != nil {
		t.Fatal(err)
	}
	if r.Version != "v1" || r.Nonce != "n1" || !r.IsFull || r.Delta != nil {
		t.Errorf("full response parsed as %+v", r)
	}
	if diff := cmp.Diff(tbl, got, protocmp.Transform()); diff != "" {
		t.Errorf("full table (-want +got):\n%s", diff)
	}

	deltaResp, err := proto.Marshal(&meshdnsv1.StreamNameTableResponse{VersionInfo: "v2", Nonce: "n2", Update: &meshdnsv1.StreamNameTableResponse_Delta{Delta: &meshdnsv1.NameTableDelta{
		BaseVersion: "v1", Upserted: map[string]*meshdnsv1.NameInfo{"b.example": {Ips: []string{"10.0.0.2"}}}, Removed: []string{"a.example"}}}})
	if err != nil {
		t.Fatal(err)
	}
	r, err = readResponse(deltaResp)
	if err != nil {
		t.Fatal(err)
	}
	if r.Version != "v2" || r.IsFull || r.Delta.BaseVersion != "v1" || len(r.Delta.Upserted) != 1 || r.Delta.Removed[0] != "a.example" {
		t.Errorf("delta response parsed as %+v", r)
	}
	// Oneof: the last of full and delta wins, as in proto.
	r, err = readResponse(append(append([]byte(nil), deltaResp...), fullResp...))
	if err != nil || !r.IsFull || r.Delta != nil || r.Version != "v1" {
		t.Errorf("delta then full parsed as %+v, %v", r, err)
	}
	if _, err := readResponse(fullResp[:len(fullResp)-2]); err == nil {
		t.Error("a cut response parsed")
	}
}

// readResponse reads a response held in memory, with no spool.
func readResponse(b []byte) (*namewire.Response, error) {
	return namewire.ReadResponse(bytes.NewReader(b), nil)
}

func fullResponse(version, nonce string, t *meshdnsv1.NameTable) *meshdnsv1.StreamNameTableResponse {
	return &meshdnsv1.StreamNameTableResponse{VersionInfo: version, Nonce: nonce, Update: &meshdnsv1.StreamNameTableResponse_Full{Full: t}}
}

// walked is what a walk of a table saw.
type walked struct {
	Names map[string]string // host -> its NameInfo, marshalled
	Zones []string
}

func walkRaw(t namewire.RawTable) (walked, error) {
	w := walked{Names: map[string]string{}}
	err := t(func(host, info []byte) error {
		w.Names[string(host)] = string(info)
		return nil
	}, func(z string) error {
		w.Zones = append(w.Zones, z)
		return nil
	})
	return w, err
}

// A table in a file (a StreamNameTableResponse, as the agent's state
// file), streamed from disk, walks exactly as the same bytes in memory; a
// cut file fails instead of yielding half a table.
func TestFileTableWalksAsMemory(t *testing.T) {
	nt := &meshdnsv1.NameTable{AuthoritativeZones: []string{"cluster.local"}, Table: map[string]*meshdnsv1.NameInfo{
		"a.example": {Ips: []string{"10.0.0.1"}}, "b.example": {Ips: []string{"10.0.0.1"}}, "c.example": {Ips: []string{"10.0.0.1"}},
		"d.example": {Ports: []*meshdnsv1.Port{{Name: "http", Port: 80}}, Ttl: 7},
	}}
	wire, err := proto.Marshal(nt)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "nametable.pb")
	file := append(namewire.AppendFullHead(nil, "v1", len(wire)), wire...)
	if err := os.WriteFile(path, file, 0o600); err != nil {
		t.Fatal(err)
	}
	want, err := walkRaw(namewire.MemTable(wire))
	if err != nil {
		t.Fatal(err)
	}
	got, err := walkRaw(namewire.FileTable(path))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("file walk (-memory +file):\n%s", diff)
	}
	if len(got.Names) != 4 || len(got.Zones) != 1 {
		t.Errorf("walked %d names and %d zones, want 4 and 1", len(got.Names), len(got.Zones))
	}
	if v, shape, err := namewire.FileVersion(path); v != "v1" || err != nil || shape.Names != 4 {
		t.Errorf("FileVersion = %q, %+v, %v; want v1 with 4 names", v, shape, err)
	}

	cut := filepath.Join(dir, "cut.pb")
	if err := os.WriteFile(cut, file[:len(file)-5], 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := walkRaw(namewire.FileTable(cut)); err == nil {
		t.Error("walk of a cut file: no error")
	}
	// The version alone, without a table, is no state.
	noTable := filepath.Join(dir, "notable.pb")
	if err := os.WriteFile(noTable, file[:4], 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := namewire.FileVersion(noTable); !errors.Is(err, namewire.ErrNoTable) {
		t.Errorf("FileVersion of a file without a table: %v, want ErrNoTable", err)
	}
}
