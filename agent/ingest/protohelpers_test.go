package ingest

import (
	"crypto/sha256"
	"io"
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
	nt, err := decodeTable(b)
	if err != nil {
		t.Fatalf("namewire decode of a proto-marshalled table: %v", err)
	}
	return nt
}

// decodeTable decodes a marshalled NameTable whole with namewire, name by
// name as the agent does (namewire's own tests hold it to the generated
// code).
func decodeTable(b []byte) (*namewire.NameTable, error) {
	settings, err := namewire.TableSettings(b)
	if err != nil {
		return nil, err
	}
	nt, err := namewire.Collect(func(name func(host, info []byte) error, zone func(string) error) error {
		return namewire.EachName(b, name, zone)
	})
	if err != nil {
		return nil, err
	}
	nt.Settings = settings
	return nt, nil
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

// newFileVersion returns the version of the size bytes of r, whose SHA-256
// is sum, without converting it ahead (ReadFileVersion does): its walks
// read the JSON. r must stay readable while the version is served.
func newFileVersion(r io.ReaderAt, size int64, sum [sha256.Size]byte) *FileVersion {
	return &FileVersion{r: r, size: size, sum: sum}
}
