package namewire_test

import (
	"bytes"
	"errors"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/meshdns/meshdns/internal/namewire"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// settingsField is the number of NameTable's settings.
var settingsField = (&meshdnsv1.NameTable{}).ProtoReflect().Descriptor().Fields().ByName("settings").Number()

// stateFile is a state file as the agent's copy of a full table writes it:
// the version and a table of one name and one zone with the settings
// fields s1 and s2 (raw: any bytes) where layout says, and extra raw bytes
// at the table's end and tail at the response's end.
func stateFile(version string, s1, s2, extra, tail []byte, layout uint8) []byte {
	info := namewire.NameInfo{IPs: []string{"10.0.0.1"}}
	var table []byte
	if layout&1 != 0 { // settings first, as a delta applied writes them
		table = append(table, msg(settingsField, s1)...)
	}
	table = namewire.AppendEntry(table, "a.example", info.Append(nil))
	table = namewire.AppendZone(table, "example")
	if layout&1 == 0 { // settings after the names, as the control plane sends them
		table = append(table, msg(settingsField, s1)...)
	}
	if layout&2 != 0 { // a second settings field: merged
		table = append(table, msg(settingsField, s2)...)
	}
	table = append(table, extra...)
	return append(namewire.AppendFullResponse(nil, version, table), tail...)
}

func writeFile(t testing.TB, b []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "nametable.pb")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestFileSettings(t *testing.T) {
	policy := &namewire.AgentSettings{Policy: &namewire.DNSPolicy{Mode: namewire.PolicyModeEnforce, Source: "ns/deny"}}
	enforce := policy.Append(nil)
	zone := (&namewire.AgentSettings{PodZone: "z1"}).Append(nil)
	entry := namewire.AppendEntry(nil, "a.example", (&namewire.NameInfo{IPs: []string{"10.0.0.1"}}).Append(nil))
	tests := []struct {
		name    string
		file    []byte // nil: no file
		want    *namewire.AgentSettings
		wantErr error // or nil; any error when errText is set
		errText string
	}{
		{name: "no file", wantErr: fs.ErrNotExist},
		{name: "empty file", file: []byte{}, wantErr: namewire.ErrNoTable},
		{name: "a version, no table", file: msg(namewire.FieldResponseVersion, []byte("v1")), wantErr: namewire.ErrNoTable},
		{name: "a delta, no table", file: namewire.AppendDeltaResponse(nil, "v1", nil), wantErr: namewire.ErrNoTable},
		{name: "no settings", file: namewire.AppendFullResponse(nil, "v1", entry)},
		{name: "settings after the names", file: stateFile("v1", enforce, nil, nil, nil, 0), want: policy},
		{name: "settings before the names", file: stateFile("v1", enforce, nil, nil, nil, 1), want: policy},
		{
			name: "two settings fields: merged",
			file: stateFile("v1", enforce, zone, nil, nil, 2),
			want: &namewire.AgentSettings{Policy: policy.Policy, PodZone: "z1"},
		},
		{name: "a table after the first: not read", file: stateFile("v1", enforce, nil, nil, namewire.AppendFullResponse(nil, "v2", nil), 0), want: policy},
		{name: "unknown setting", file: stateFile("v1", varint(9, 1), nil, nil, nil, 0), wantErr: namewire.ErrUnknownSetting},
		{name: "damaged after the settings", file: stateFile("v1", enforce, nil, []byte{0x0a, 0x05}, nil, 1), errText: "name table"},
		{name: "cut in a name", file: stateFile("v1", enforce, nil, nil, nil, 1)[:20], errText: "truncated"},
		{name: "a group in the table", file: stateFile("v1", enforce, nil, []byte{0x5b, 0x5c}, nil, 1), errText: "wire type 3"},
		{name: "field number out of range", file: stateFile("v1", enforce, nil, []byte{0xf8, 0xff, 0xff, 0xff, 0x1f, 0}, nil, 1), errText: "out of range"},
		{
			name:    "a table longer than a file can be",
			file:    append(protowire.AppendTag(nil, namewire.FieldResponseFull, protowire.BytesType), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01),
			errText: "truncated",
		},
		{
			name: "settings longer than the bound",
			file: protowire.AppendVarint(append(protowire.AppendVarint(tag(namewire.FieldResponseFull, protowire.BytesType), 32<<20),
				tag(settingsField, protowire.BytesType)...), 17<<20),
			errText: "settings of more than",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "nametable.pb")
			if tc.file != nil {
				path = writeFile(t, tc.file)
			}
			got, err := namewire.FileSettings(path)
			switch {
			case tc.errText != "":
				if err == nil || !bytes.Contains([]byte(err.Error()), []byte(tc.errText)) {
					t.Fatalf("FileSettings = %+v, %v; want an error containing %q", got, err, tc.errText)
				}
			case !errors.Is(err, tc.wantErr):
				t.Fatalf("FileSettings error %v, want %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got, equate); diff != "" {
				t.Errorf("settings (-want +got):\n%s", diff)
			}
		})
	}
}

// Reading the settings of a large table allocates what the settings need,
// nothing per name: the supervisor's safe mode reads them.
func TestFileSettingsAllocs(t *testing.T) {
	info := (&namewire.NameInfo{IPs: []string{"10.0.0.1"}}).Append(nil)
	var table []byte
	for i := range 10_000 {
		table = namewire.AppendEntry(table, "svc"+string(rune('a'+i%26))+".example", info)
	}
	table = namewire.AppendTableSettings(table, &namewire.AgentSettings{Policy: &namewire.DNSPolicy{Source: "ns/p"}})
	path := writeFile(t, namewire.AppendFullResponse(nil, "v1", table))
	allocs := testing.AllocsPerRun(5, func() {
		if s, err := namewire.FileSettings(path); err != nil || s.Policy == nil {
			t.Fatalf("FileSettings = %+v, %v", s, err)
		}
	})
	// The file, its buffer, the settings field and the settings decoded.
	if allocs > 12 {
		t.Errorf("FileSettings of 10,000 names: %v allocations, want at most 12", allocs)
	}
}

func BenchmarkFileSettings(b *testing.B) {
	r := rand.New(rand.NewPCG(31, 32))
	names := randTable(r)
	names.Settings = nil // one settings field, added below
	table, _ := proto.Marshal(names)
	for len(table) < 25<<20 { // a 100,000-service table's size
		table = append(table, table...)
	}
	s, _ := proto.Marshal(&meshdnsv1.NameTable{Settings: randSettings(r)})
	path := writeFile(b, namewire.AppendFullResponse(nil, "v1", append(table, s...)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := namewire.FileSettings(path); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzFileSettings checks the settings read from a state file against
// proto's decoding of the whole file, against proto's decoding of the
// settings fields of its first table (the names may be anything: they are
// not read), and against the agent's restore of the file (FileVersion).
func FuzzFileSettings(f *testing.F) {
	r := rand.New(rand.NewPCG(33, 34))
	for range 3 {
		s, _ := proto.Marshal(randSettings(r))
		f.Add("v1", s, []byte(nil), []byte(nil), []byte(nil), uint8(0))
	}
	for _, c := range strictCases {
		f.Add("v1", c, []byte(nil), []byte(nil), []byte(nil), uint8(1))
	}
	policy := msg(1, varint(5, 1))
	f.Add("v1", policy, msg(4, []byte("z")), []byte(nil), []byte(nil), uint8(3))                          // two settings: merged
	f.Add("v1", policy, []byte(nil), []byte(nil), namewire.AppendDeltaResponse(nil, "v2", nil), uint8(0)) // a delta after: proto drops the table
	f.Add("v1", policy, []byte(nil), []byte(nil), stateFile("v2", nil, nil, nil, nil, 0), uint8(0))       // a second table: merged by proto
	f.Add("v1", policy, []byte(nil), []byte{0x0a, 0x03, 0x0a, 0x01, 0xff}, []byte(nil), uint8(1))         // a name not UTF-8: not read
	f.Add("\xff", policy, []byte(nil), []byte(nil), []byte(nil), uint8(0))                                // a version not UTF-8: not read
	f.Add("v1", policy, []byte(nil), []byte{0x5b, 0x08, 0x01, 0x5c}, []byte(nil), uint8(1))               // a group: refused
	f.Add("v1", policy, []byte(nil), []byte{0xf8, 0xff, 0xff, 0xff, 0x1f, 0}, []byte(nil), uint8(1))      // field 2^30: out of range
	f.Add("v1", policy, []byte(nil), []byte{0x1a, 0x05, 0x22}, []byte(nil), uint8(0))                     // settings cut
	table := []byte{0x1a, 0x02, 0x1a, 0x00}
	f.Add("", []byte(nil), []byte(nil), []byte(nil), append([]byte{0xf8, 0xff, 0xff, 0xff, 0x1f, 0}, table...), uint8(0))                                  // field 2^30 before the table
	f.Add("", []byte(nil), []byte(nil), []byte(nil), append([]byte{0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02}, table...), uint8(0)) // a varint overflowing
	path := filepath.Join(f.TempDir(), "nametable.pb")
	f.Fuzz(func(t *testing.T, version string, s1, s2, extra, tail []byte, layout uint8) {
		// The file made of the parts, then the tail alone as a file: the
		// raw bytes of a response.
		for _, file := range [][]byte{stateFile(version, s1, s2, extra, tail, layout), tail} {
			if err := os.WriteFile(path, file, 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := namewire.FileSettings(path)
			ref := firstTable(file)
			if ref.group && err != nil {
				continue // a group, which the file readers refuse where proto skips it
			}
			checkAgainstResponse(t, file, got, err)
			checkAgainstTable(t, file, ref, got, err)
			checkAgainstRestore(t, path, got, err)
		}
	})
}

// tableRef is what a walk of a response with protowire finds up to its
// first full table, and in that table's fields.
type tableRef struct {
	ok       bool   // the fields walked are well formed, as proto reads them
	table    bool   // the response holds a full table
	settings []byte // the table's settings fields, tags and lengths included
	group    bool   // a group among the fields walked
}

func firstTable(b []byte) tableRef {
	var ref tableRef
	var table []byte
	ref.ok = eachField(b, func(num protowire.Number, typ protowire.Type, _, v []byte) bool {
		ref.group = ref.group || isGroup(typ)
		if num == namewire.FieldResponseFull && typ == protowire.BytesType {
			table, ref.table = v, true
			return false
		}
		return true
	})
	if !ref.ok || !ref.table {
		return ref
	}
	ref.ok = eachField(table, func(num protowire.Number, typ protowire.Type, field, _ []byte) bool {
		ref.group = ref.group || isGroup(typ)
		if num == settingsField && typ == protowire.BytesType {
			ref.settings = append(ref.settings, field...)
		}
		return true
	})
	return ref
}

func isGroup(typ protowire.Type) bool {
	return typ == protowire.StartGroupType || typ == protowire.EndGroupType
}

// eachField calls field with each field of b (whole, and its value when
// it is length-delimited) until it returns false, and reports whether the
// fields it walked are well formed.
func eachField(b []byte, field func(num protowire.Number, typ protowire.Type, field, v []byte) bool) bool {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeField(b)
		if n < 0 || num > protowire.MaxValidNumber {
			return false
		}
		var v []byte
		if typ == protowire.BytesType {
			_, _, m := protowire.ConsumeTag(b)
			v, _ = protowire.ConsumeBytes(b[m:n])
		}
		if !field(num, typ, b[:n], v) {
			return true
		}
		b = b[n:]
	}
	return true
}

// checkAgainstResponse holds what FileSettings read to the settings of
// the full table proto decodes from the file, when the file holds one
// update at most: a second table proto would merge, a delta after the
// table would drop it (a oneof), and the agent never writes either.
func checkAgainstResponse(t *testing.T, file []byte, got *namewire.AgentSettings, err error) {
	t.Helper()
	pb := new(meshdnsv1.StreamNameTableResponse)
	if proto.Unmarshal(file, pb) != nil {
		return
	}
	updates := 0
	eachField(file, func(num protowire.Number, typ protowire.Type, _, _ []byte) bool {
		if typ == protowire.BytesType && (num == namewire.FieldResponseFull || num == namewire.FieldResponseDelta) {
			updates++
		}
		return true
	})
	if updates > 1 {
		return
	}
	if pb.GetFull() == nil {
		if !errors.Is(err, namewire.ErrNoTable) {
			t.Fatalf("%x: proto finds no table, FileSettings = %+v, %v", file, got, err)
		}
		return
	}
	if !compareStrict(t, file, nil, err, pb.GetFull().GetSettings().ProtoReflect()) {
		return
	}
	if diff := cmp.Diff(settingsOf(pb.GetFull().GetSettings()), got, equate); diff != "" {
		t.Fatalf("%x: (-proto +FileSettings):\n%s", file, diff)
	}
}

// checkAgainstTable holds what FileSettings read to proto's decoding of
// the settings fields of the file's first table, whatever its names: an
// error when the file is malformed up to the table's end, ErrNoTable when
// it holds none.
func checkAgainstTable(t *testing.T, file []byte, ref tableRef, got *namewire.AgentSettings, err error) {
	t.Helper()
	switch {
	case !ref.ok:
		if err == nil {
			t.Fatalf("%x: malformed up to its table's end, FileSettings read %+v", file, got)
		}
		return
	case !ref.table:
		if !errors.Is(err, namewire.ErrNoTable) {
			t.Fatalf("%x: no table, FileSettings = %+v, %v", file, got, err)
		}
		return
	}
	pt := new(meshdnsv1.NameTable)
	perr := proto.Unmarshal(ref.settings, pt)
	if !compareStrict(t, ref.settings, perr, err, pt.GetSettings().ProtoReflect()) {
		return
	}
	if diff := cmp.Diff(settingsOf(pt.GetSettings()), got, equate); diff != "" {
		t.Fatalf("%x: the table's settings fields (-proto +FileSettings):\n%s", file, diff)
	}
}

// checkAgainstRestore holds what FileSettings read to the settings a
// restore of the file applies, when FileVersion reads the file.
func checkAgainstRestore(t *testing.T, path string, got *namewire.AgentSettings, err error) {
	t.Helper()
	_, shape, verr := namewire.FileVersion(path)
	if verr != nil {
		return // FileVersion reads on after the table
	}
	want, werr := shape.TableSettings()
	if (werr == nil) != (err == nil) {
		t.Fatalf("restore's settings error %v, FileSettings error %v", werr, err)
	}
	if diff := cmp.Diff(want, got, equate); diff != "" {
		t.Fatalf("(-restore +FileSettings):\n%s", diff)
	}
}

func settingsOf(m *meshdnsv1.AgentSettings) *namewire.AgentSettings {
	if m == nil {
		return nil
	}
	return fromSettings(m)
}
