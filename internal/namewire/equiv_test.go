package namewire_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/meshdns/meshdns/internal/namewire"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// The generated code is the reference: random messages marshalled by it
// decode to the same values with namewire, namewire marshals them to the
// same bytes, and the JSON forms agree with protojson's.

var deterministic = proto.MarshalOptions{Deterministic: true}

// randString returns a short string, sometimes empty, sometimes beyond
// ASCII (what JSON must escape, multi-byte runes, a surrogate pair's rune).
func randString(r *rand.Rand) string {
	const alphabet = "abcxyz019.-*_\"\\/\n\t\x01<>&é漢😀\u2028"
	runes := []rune(alphabet)
	n := r.IntN(12)
	if r.IntN(5) == 0 {
		n = 0
	}
	var b strings.Builder
	for range n {
		b.WriteRune(runes[r.IntN(len(runes))])
	}
	return b.String()
}

func randStrings(r *rand.Rand) []string {
	var out []string
	for range r.IntN(4) {
		out = append(out, randString(r))
	}
	return out
}

func randUint32(r *rand.Rand) uint32 {
	switch r.IntN(4) {
	case 0:
		return 0
	case 1:
		return r.Uint32()
	}
	return uint32(r.IntN(70000))
}

func randInfo(r *rand.Rand) *meshdnsv1.NameInfo {
	m := new(meshdnsv1.NameInfo)
	randMessage(r, m.ProtoReflect())
	return m
}

func randTable(r *rand.Rand) *meshdnsv1.NameTable {
	m := new(meshdnsv1.NameTable)
	randMessage(r, m.ProtoReflect())
	return m
}

func randDelta(r *rand.Rand) *meshdnsv1.NameTableDelta {
	m := new(meshdnsv1.NameTableDelta)
	randMessage(r, m.ProtoReflect())
	return m
}

func randSettings(r *rand.Rand) *meshdnsv1.AgentSettings {
	m := new(meshdnsv1.AgentSettings)
	randMessage(r, m.ProtoReflect())
	return m
}

// fromInfo, fromTable and fromSettings convert generated messages with
// convert, independently of the codecs under test.
func fromInfo(m *meshdnsv1.NameInfo) *namewire.NameInfo { return mustConvert[namewire.NameInfo](m) }

func fromTable(m *meshdnsv1.NameTable) *namewire.NameTable {
	t := mustConvert[namewire.NameTable](m)
	if t.Table == nil {
		t.Table = map[string]*namewire.NameInfo{} // as UnmarshalNameTable makes it
	}
	return t
}

func fromSettings(m *meshdnsv1.AgentSettings) *namewire.AgentSettings {
	return mustConvert[namewire.AgentSettings](m)
}

// deltaValue is a delta with its upserts decoded, keyed by name: a value
// that two encodings of one delta share.
func deltaValue(t testing.TB, d *namewire.Delta) map[string]any {
	ups := map[string]*namewire.NameInfo{}
	for _, u := range d.Upserted {
		info := new(namewire.NameInfo)
		if err := info.Unmarshal(u.Info); err != nil {
			t.Fatalf("upsert %q checked but does not decode: %v", u.Host, err)
		}
		ups[u.Host] = info
	}
	out := map[string]any{"base": d.BaseVersion, "removed": d.Removed, "upserted": ups}
	if d.AuthoritativeZones != nil {
		out["zones"] = d.AuthoritativeZones
	}
	if d.Settings != nil {
		out["settings"] = d.Settings
	}
	return out
}

func fromDelta(t testing.TB, m *meshdnsv1.NameTableDelta) map[string]any {
	return deltaValue(t, mustConvert[namewire.Delta](m))
}

var equate = cmp.Options{cmpopts.EquateEmpty(), cmpopts.IgnoreUnexported(namewire.NameInfo{})}

func TestNameInfoWire(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	info := new(namewire.NameInfo) // reused, as the agent does
	for i := range 500 {
		pb := randInfo(r)
		b, err := deterministic.Marshal(pb)
		if err != nil {
			t.Fatal(err)
		}
		if err := info.Unmarshal(b); err != nil {
			t.Fatalf("%d: %v", i, err)
		}
		if diff := cmp.Diff(fromInfo(pb), info, equate); diff != "" {
			t.Fatalf("%d: decoded (-proto +namewire):\n%s", i, diff)
		}
		if err := namewire.CheckNameInfo(b); err != nil {
			t.Fatalf("%d: CheckNameInfo: %v", i, err)
		}
		if got := fromInfo(pb).Append(nil); !bytes.Equal(got, b) {
			t.Fatalf("%d: marshalled\n%x, proto\n%x", i, got, b)
		}
	}
}

func TestNameTableWire(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for i := range 200 {
		pb := randTable(r)
		b, err := deterministic.Marshal(pb)
		if err != nil {
			t.Fatal(err)
		}
		got, err := namewire.UnmarshalNameTable(b)
		if err != nil {
			t.Fatalf("%d: %v", i, err)
		}
		if diff := cmp.Diff(fromTable(pb), got, equate); diff != "" {
			t.Fatalf("%d: decoded (-proto +namewire):\n%s", i, diff)
		}
		if m := fromTable(pb).Marshal(); !bytes.Equal(m, b) {
			t.Fatalf("%d: marshalled\n%x, proto\n%x", i, m, b)
		}
	}
}

func TestRequestWire(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for i := range 300 {
		pb := new(meshdnsv1.StreamNameTableRequest)
		randMessage(r, pb.ProtoReflect())
		b, err := deterministic.Marshal(pb)
		if err != nil {
			t.Fatal(err)
		}
		if got := mustConvert[namewire.Request](pb).Append(nil); !bytes.Equal(got, b) {
			t.Fatalf("%d: marshalled\n%x, proto\n%x", i, got, b)
		}
	}
}

func TestDeltaWire(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for i := range 300 {
		pd := randDelta(r)
		b, err := proto.Marshal(pd)
		if err != nil {
			t.Fatal(err)
		}
		d, err := namewire.UnmarshalDelta(b)
		if err != nil {
			t.Fatalf("%d: %v", i, err)
		}
		if diff := cmp.Diff(fromDelta(t, pd), deltaValue(t, d), equate); diff != "" {
			t.Fatalf("%d: delta (-proto +namewire):\n%s", i, diff)
		}

	}
}

func TestNameInfoJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	info := new(namewire.NameInfo)
	for i := range 500 {
		pb := randInfo(r)
		want := fromInfo(pb)
		for _, protoNames := range []bool{false, true} {
			b, err := protojson.MarshalOptions{UseProtoNames: protoNames}.Marshal(pb)
			if err != nil {
				t.Fatal(err)
			}
			if err := info.DecodeJSON(b); err != nil {
				t.Fatalf("%d: %s: %v", i, b, err)
			}
			if diff := cmp.Diff(want, info, equate); diff != "" {
				t.Fatalf("%d: %s: decoded (-protojson +namewire):\n%s", i, b, diff)
			}
		}
		// The dump's encoding: protojson reads it back, and it is
		// protojson's UseProtoNames output as JSON values.
		dump, err := json.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		back := new(meshdnsv1.NameInfo)
		if err := protojson.Unmarshal(dump, back); err != nil {
			t.Fatalf("%d: protojson rejects the dump %s: %v", i, dump, err)
		}
		if !proto.Equal(pb, back) {
			t.Fatalf("%d: dump %s reads back as %v, want %v", i, dump, back, pb)
		}
		pj, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(pb)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(jsonValue(t, pj), jsonValue(t, dump)); diff != "" {
			t.Fatalf("%d: dump (-protojson +namewire):\n%s", i, diff)
		}
	}
}

func jsonValue(t testing.TB, b []byte) any {
	t.Helper()
	var v any
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if err := d.Decode(&v); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return v
}

// jsonCases are the corners of protojson's reading of a NameInfo; each is
// checked against protojson itself (TestNameInfoJSONCases) and seeds the
// fuzz test.
var jsonCases = []string{
	`{}`,
	` {"ips": ["10.0.0.1", "fd00::1"], "registry": "File"} `,
	`{"alt_hosts": ["a"], "canonical_name": "c", "altHosts": ["b"]}`,
	`{"altHosts": ["a"], "canonicalName": "c"}`,
	`{"ips": ["a"], "ips": ["b"]}`,
	`{"ips": null, "ips": ["b"]}`,
	`{"ips": null, "registry": null, "ports": null, "ttl": null}`,
	`{"ips": [null]}`,
	`{"ips": "10.0.0.1"}`,
	`{"ports": [null]}`,
	`{"ports": [{}]}`,
	`{"ports": [{"name": "http", "port": 80, "protocol": "TCP"}, {"port": "53"}]}`,
	`{"ports": [{"port": 1, "port": 2}]}`,
	`{"ports": [{"Port": 1}]}`,
	`{"endpoints": [{"hostname": "h", "ips": ["10.0.0.3"]}, {}]}`,
	`{"endpoints": [{"ip": []}]}`,
	`{"ttl": 30}`, `{"ttl": "30"}`, `{"ttl": 30.0}`, `{"ttl": 3e1}`, `{"ttl": 3E+1}`, `{"ttl": 300e-1}`,
	`{"ttl": 0.3e2}`, `{"ttl": -0}`, `{"ttl": -0.0e5}`, `{"ttl": "-0"}`, `{"ttl": 0e-7}`,
	`{"ttl": 30.5}`, `{"ttl": -1}`, `{"ttl": 4294967295}`, `{"ttl": 4294967296}`, `{"ttl": 1e10}`,
	`{"ttl": 1e-1}`, `{"ttl": 1e99999999999}`, `{"ttl": " 30"}`, `{"ttl": "30 "}`, `{"ttl": ""}`,
	`{"ttl": "0x1e"}`, `{"ttl": "030"}`, `{"ttl": 030}`, `{"ttl": true}`, `{"ttl": [30]}`, `{"ttl": "3\u0030"}`,
	`{"ttl": 100000000000000000000e-11}`, `{"ttl": 0.00000000000000000000001e23}`,
	`{"registry": "a\u00e9\ud83d\ude00\/\n"}`, `{"registry": "\ud800"}`, `{"registry": "\udc00\ud800"}`,
	`{"registry": "\ud83d\u0041"}`, `{"registry": "\x"}`, `{"registry": "\u12"}`, "{\"registry\": \"\xff\"}",
	"{\"registry\": \"a\tb\"}", `{"regis\u0074ry": "x"}`, `{"registry": 1}`,
	`{"unknown": 1}`, `{"Ips": []}`, `{"ips": []} {}`, `{"ips": [],}`, `{"ips" []}`, `{`, `[]`, `null`, ``,
	`{"ips": ["a",]}`, `{"ips": ["a" "b"]}`, `{"ttl": 1,}`, `{"ttl": +1}`, `{"ttl": .5}`, `{"ttl": 1.}`,
}

func TestNameInfoJSONCases(t *testing.T) {
	for _, in := range jsonCases {
		t.Run(in, func(t *testing.T) { compareJSON(t, []byte(in)) })
	}
}

// compareJSON checks that DecodeJSON accepts what protojson accepts, with
// the same value, and rejects the rest with an error.
func compareJSON(t *testing.T, in []byte) {
	pb := new(meshdnsv1.NameInfo)
	perr := protojson.Unmarshal(in, pb)
	got := new(namewire.NameInfo)
	err := got.DecodeJSON(in)
	if (perr == nil) != (err == nil) {
		t.Fatalf("%q: protojson error %v, namewire error %v", in, perr, err)
	}
	if err != nil {
		return
	}
	if diff := cmp.Diff(fromInfo(pb), got, equate); diff != "" {
		t.Fatalf("%q: (-protojson +namewire):\n%s", in, diff)
	}
}

// wireCases are malformed or unusual encodings of a NameInfo.
func wireCases() [][]byte {
	valid, _ := deterministic.Marshal(&meshdnsv1.NameInfo{Ips: []string{"10.0.0.1"}, Ports: []*meshdnsv1.Port{{Name: "http", Port: 80}}, Ttl: 30})
	return [][]byte{
		valid,
		valid[:len(valid)-1],                 // cut
		{},                                   // empty
		{0x0a, 0x02, 0xff, 0xfe},             // ips: not UTF-8
		{0x12, 0x01, 0x80},                   // registry: not UTF-8
		{0x00, 0x01},                         // field 0
		{0xf8, 0xff, 0xff, 0xff, 0x0f, 0},    // field 2^29-1 varint: unknown, skipped
		{0xf8, 0xff, 0xff, 0xff, 0x1f, 0},    // field 2^30: out of range
		{0x48, 0x80, 0x80, 0x80, 0x80, 0x10}, // ttl beyond 32 bits: truncated
		{0x4a, 0x01, 0x41},                   // ttl as bytes: the wrong type, skipped
		{0x08, 0x01},                         // ips as varint: skipped
		{0x32, 0x00, 0x32, 0x02, 0x10, 0x05}, // two ports
		{0x32, 0x03, 0x0a, 0x01, 0xff},       // port name not UTF-8
		{0x3a, 0x02, 0x12, 0x00},             // endpoint with an empty ip
		{0x3a, 0x03, 0x12, 0x01, 0xc0},       // endpoint ip not UTF-8
		{0x5b, 0x08, 0x01, 0x5c},             // a group (field 11), skipped
		{0x5b, 0x08, 0x01, 0x64},             // a group closed by another number
		{0x5c},                               // an end group alone
		{0x0d, 0x01, 0x02, 0x03, 0x04},       // ips as fixed32: skipped
		{0x0d, 0x01, 0x02},                   // a cut fixed32
		{0x0a, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, // a length overflowing
		{0x48, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},       // a 10-byte varint
		{0x48, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02},       // varint overflow
		{0x0f}, // wire type 7
	}
}

func TestNameInfoWireCases(t *testing.T) {
	for i, in := range wireCases() {
		t.Run(fmt.Sprint(i), func(t *testing.T) { compareWire(t, in) })
	}
}

// compareWire checks that Unmarshal and CheckNameInfo accept what
// proto.Unmarshal accepts, with the same value, and reject the rest.
func compareWire(t *testing.T, in []byte) {
	pb := new(meshdnsv1.NameInfo)
	perr := proto.Unmarshal(in, pb)
	got := new(namewire.NameInfo)
	err := got.Unmarshal(in)
	if (perr == nil) != (err == nil) {
		t.Fatalf("%x: proto error %v, namewire error %v", in, perr, err)
	}
	if cerr := namewire.CheckNameInfo(in); (cerr == nil) != (err == nil) {
		t.Fatalf("%x: Unmarshal error %v, CheckNameInfo error %v", in, err, cerr)
	}
	if err != nil {
		return
	}
	if diff := cmp.Diff(fromInfo(pb), got, equate); diff != "" {
		t.Fatalf("%x: (-proto +namewire):\n%s", in, diff)
	}
}

// The table file's keys and zone lists read as protojson reads them: the
// keys of a map<string, NameInfo>, a repeated string.
func TestJSONKeysAndZones(t *testing.T) {
	for _, in := range []string{
		`"a.example"`, ` "a\u00e9\ud83d\ude00" `, `"\ud800"`, "\"\xff\"", `"a`, `a`, `"a" "b"`, `""`, `"\/\b"`,
	} {
		t.Run("key "+in, func(t *testing.T) {
			pb := new(meshdnsv1.NameTable)
			perr := protojson.Unmarshal([]byte(`{"table": {`+in+`: {}}}`), pb)
			got, err := namewire.UnquoteJSON([]byte(in))
			if (perr == nil) != (err == nil) {
				t.Fatalf("protojson error %v, namewire error %v", perr, err)
			}
			if err == nil && (len(pb.Table) != 1 || pb.Table[got] == nil) {
				t.Fatalf("key %q, protojson read %v", got, pb.Table)
			}
		})
	}
	for _, in := range []string{
		`null`, `[]`, `["a", "b"]`, `[null]`, `["a",]`, `"a"`, `[1]`, `["\ud800"]`, `[] []`, ` [ "x" ] `,
	} {
		t.Run("zones "+in, func(t *testing.T) {
			pb := new(meshdnsv1.NameTable)
			perr := protojson.Unmarshal([]byte(`{"authoritative_zones": `+in+`}`), pb)
			got, err := namewire.DecodeJSONStrings([]byte(in))
			if (perr == nil) != (err == nil) {
				t.Fatalf("protojson error %v, namewire error %v", perr, err)
			}
			if diff := cmp.Diff(pb.GetAuthoritativeZones(), got, equate); err == nil && diff != "" {
				t.Fatalf("(-protojson +namewire):\n%s", diff)
			}
		})
	}
}
