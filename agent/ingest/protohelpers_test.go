package ingest

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/meshdns/meshdns/internal/namewire"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// fromProto returns the namewire form of a generated NameTable, through
// its wire form (so a test built with the generated types also checks the
// agent's decoder).
func fromProto(t testing.TB, m *meshdnsv1.NameTable) *namewire.NameTable {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	nt, err := namewire.UnmarshalNameTable(b)
	if err != nil {
		t.Fatalf("namewire decode of a proto-marshalled table: %v", err)
	}
	return nt
}

// wireVersion is a version held in wire form in memory, as the discovery
// client holds one without a state dir.
type wireVersion struct {
	id string
	b  []byte
}

func memVersion(id string, b []byte) *wireVersion { return &wireVersion{id: id, b: b} }

func (v *wireVersion) ID() string { return v.id }

func (v *wireVersion) Walk(name func(host, info []byte) error, zone func(string) error) error {
	return namewire.EachName(v.b, name, zone)
}

// protoVersion is the version of a generated NameTable.
func protoVersion(t testing.TB, id string, m *meshdnsv1.NameTable) *wireVersion {
	t.Helper()
	return memVersion(id, fromProto(t, m).Marshal())
}

// wireFromDump marshals a decoded table.
func wireFromDump(t testing.TB, nt *namewire.NameTable) []byte {
	t.Helper()
	return nt.Marshal()
}
