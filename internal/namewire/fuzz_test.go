package namewire_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/meshdns/meshdns/internal/namewire"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// Every decoder is fuzzed against the generated code: whatever the bytes,
// namewire never panics, fails exactly when proto (or protojson) fails,
// and otherwise decodes the same values. The seeds are the corner cases
// of the unit tests and a few random messages.

func FuzzNameInfoWire(f *testing.F) {
	for _, c := range wireCases() {
		f.Add(c)
	}
	r := rand.New(rand.NewPCG(11, 12))
	for range 3 {
		b, _ := proto.Marshal(randInfo(r))
		f.Add(b)
	}
	f.Fuzz(compareWire)
}

func FuzzNameInfoJSON(f *testing.F) {
	for _, c := range jsonCases {
		f.Add([]byte(c))
	}
	f.Fuzz(compareJSON)
}

func FuzzNameTable(f *testing.F) {
	r := rand.New(rand.NewPCG(13, 14))
	for range 3 {
		b, _ := proto.Marshal(randTable(r))
		f.Add(b)
	}
	f.Add([]byte{0x0a, 0x00})                                     // an entry with neither key nor value
	f.Add([]byte{0x0a, 0x06, 0x12, 0x00, 0x12, 0x02, 0x48, 0x07}) // two values of one entry: merged
	f.Add([]byte{0x0a, 0x03, 0x0a, 0x01, 0xff})                   // a key not UTF-8
	f.Add([]byte{0x12, 0x01, 0xff})                               // a zone not UTF-8
	f.Add([]byte{0x1a, 0x02, 0x48, 0x01})                         // settings with an unknown field: rejected
	f.Add([]byte{0x1a, 0x02, 0x22, 0x00, 0x1a, 0x02, 0x2a, 0x00}) // two settings: merged
	f.Fuzz(func(t *testing.T, in []byte) {
		pb := new(meshdnsv1.NameTable)
		perr := proto.Unmarshal(in, pb)
		got, err := namewire.UnmarshalNameTable(in)
		if !compareStrict(t, in, perr, err, pb.GetSettings().ProtoReflect()) {
			return
		}
		if diff := cmp.Diff(fromTable(pb), got, equate); diff != "" {
			t.Fatalf("%x: (-proto +namewire):\n%s", in, diff)
		}
	})
}

func FuzzDelta(f *testing.F) {
	r := rand.New(rand.NewPCG(15, 16))
	for range 3 {
		b, _ := proto.Marshal(randDelta(r))
		f.Add(b)
	}
	up := func(host string, info ...byte) []byte {
		e := append([]byte{0x0a, byte(len(host))}, host...)
		e = append(append(e, 0x12, byte(len(info))), info...)
		return append([]byte{0x12, byte(len(e))}, e...)
	}
	f.Add(append(up("a", 0x48, 0x01), up("a", 0x48, 0x02)...))                // a name twice: the last wins
	f.Add(up("a", 0x0a, 0x01, 0xff))                                          // an upsert not UTF-8
	f.Add([]byte{0x22, 0x03, 0x0a, 0x01, 0x61, 0x22, 0x03, 0x0a, 0x01, 0x62}) // two zone sets: merged
	f.Add([]byte{0x22, 0x00})                                                 // an empty zone set
	f.Add([]byte{0x2a, 0x00})                                                 // empty settings: the defaults
	f.Add([]byte{0x2a, 0x04, 0x0a, 0x02, 0x10, 0x05})                         // a policy with an unknown action
	f.Fuzz(func(t *testing.T, in []byte) {
		pb := new(meshdnsv1.NameTableDelta)
		perr := proto.Unmarshal(in, pb)
		got, err := namewire.UnmarshalDelta(in)
		if !compareStrict(t, in, perr, err, pb.GetSettings().ProtoReflect()) {
			return
		}
		if diff := cmp.Diff(fromDelta(t, pb), deltaValue(t, got), equate); diff != "" {
			t.Fatalf("%x: (-proto +namewire):\n%s", in, diff)
		}
	})
}

func FuzzJSONStrings(f *testing.F) {
	for _, s := range []string{`"a.example"`, `"\ud83d\ude00"`, `"\ud800"`, "\"\xff\"", `["a", "b"]`, `null`, `[null]`, `["a",]`, `"a" "b"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		// A key protojson reads must be a string token: anything else
		// would change the document's shape around it.
		if key, err := namewire.UnquoteJSON(in); err == nil {
			pb := new(meshdnsv1.NameTable)
			if perr := protojson.Unmarshal([]byte(`{"table": {`+string(in)+`: {}}}`), pb); perr != nil {
				t.Fatalf("%q: namewire reads key %q, protojson fails: %v", in, key, perr)
			}
			if len(pb.Table) != 1 || pb.Table[key] == nil {
				t.Fatalf("%q: namewire reads key %q, protojson %v", in, key, pb.Table)
			}
		}
		pb := new(meshdnsv1.NameTable)
		perr := protojson.Unmarshal([]byte(`{"authoritative_zones": `+string(in)+`}`), pb)
		got, err := namewire.DecodeJSONStrings(in)
		if (perr == nil) != (err == nil) {
			t.Fatalf("%q: protojson error %v, namewire error %v", in, perr, err)
		}
		if diff := cmp.Diff(pb.GetAuthoritativeZones(), got, equate); err == nil && diff != "" {
			t.Fatalf("%q: (-protojson +namewire):\n%s", in, diff)
		}
	})
}

// One NameInfo decodes names one after another, reusing its lists, the
// strings it held and the port messages it decoded: decoding b after a
// (and a again after b, and so on) must be decoding each alone, and leave
// what a caller kept of the one before as it was (its strings, and each
// endpoint's ForZones).
func FuzzNameInfoReuse(f *testing.F) {
	infos := clusterInfos(20)
	for i := range infos {
		f.Add(infos[i], infos[(i+7)%len(infos)])
	}
	cases := wireCases()
	for i := range cases {
		f.Add(cases[i], infos[3])
		f.Add(infos[3], cases[i])
	}
	r := rand.New(rand.NewPCG(17, 18)) // endpoints with zones and hints
	for range 3 {
		a, _ := proto.Marshal(randInfo(r))
		b, _ := proto.Marshal(randInfo(r))
		f.Add(a, b)
	}
	f.Fuzz(func(t *testing.T, a, b []byte) {
		var reused namewire.NameInfo
		var kept namewire.NameInfo // what a caller may keep of the last
		for i, in := range [][]byte{a, b, a, b, a} {
			var alone namewire.NameInfo
			errAlone := alone.Unmarshal(in)
			if err := reused.Unmarshal(in); fmt.Sprint(err) != fmt.Sprint(errAlone) {
				t.Fatalf("%x decoded %d-th: error %v, alone %v", in, i, err, errAlone)
			}
			if diff := cmp.Diff(&alone, &reused, equate); errAlone == nil && diff != "" {
				t.Fatalf("%x decoded %d-th: (-alone +reused):\n%s", in, i, diff)
			}
			if i > 0 {
				var want namewire.NameInfo
				if err := want.Unmarshal([][]byte{a, b}[(i-1)%2]); err == nil {
					if diff := cmp.Diff(&want, &kept, equate); diff != "" {
						t.Fatalf("what was kept changed after %x: (-want +kept):\n%s", in, diff)
					}
				}
			}
			kept = reused
			kept.IPs, kept.AltHosts, kept.Ports = slices.Clone(reused.IPs), slices.Clone(reused.AltHosts), slices.Clone(reused.Ports)
			kept.Endpoints = slices.Clone(reused.Endpoints)
			for i := range kept.Endpoints {
				kept.Endpoints[i].IPs = slices.Clone(kept.Endpoints[i].IPs)
			}
		}
	})
}
