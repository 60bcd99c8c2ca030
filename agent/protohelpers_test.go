package agent

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
