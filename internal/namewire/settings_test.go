package namewire_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/meshdns/meshdns/internal/namewire"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

func TestSettingsWire(t *testing.T) {
	r := rand.New(rand.NewPCG(17, 18))
	got := new(namewire.AgentSettings)
	for i := range 500 {
		pb := randSettings(r)
		b, err := deterministic.Marshal(pb)
		if err != nil {
			t.Fatal(err)
		}
		if err := got.Unmarshal(b); err != nil {
			t.Fatalf("%d: %v", i, err)
		}
		if diff := cmp.Diff(fromSettings(pb), got, equate); diff != "" {
			t.Fatalf("%d: decoded (-proto +namewire):\n%s", i, diff)
		}
		if m := fromSettings(pb).Append(nil); !bytes.Equal(m, b) {
			t.Fatalf("%d: marshalled\n%x, proto\n%x", i, m, b)
		}
	}
}

func TestSettingsJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(19, 20))
	for i := range 500 {
		pb := randSettings(r)
		want := fromSettings(pb)
		for _, opts := range []protojson.MarshalOptions{{}, {UseProtoNames: true}, {UseEnumNumbers: true}} {
			b, err := opts.Marshal(pb)
			if err != nil {
				t.Fatal(err)
			}
			got, err := namewire.DecodeJSONSettings(b)
			if err != nil {
				t.Fatalf("%d: %s: %v", i, b, err)
			}
			if diff := cmp.Diff(want, got, equate); diff != "" {
				t.Fatalf("%d: %s: decoded (-protojson +namewire):\n%s", i, b, diff)
			}
		}
		// The dump (encoding/json of the namewire value) is protojson's
		// UseProtoNames output, enums by name.
		dump, err := json.Marshal(want)
		if err != nil {
			t.Fatal(err)
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

// tag, msg and varint write protobuf by hand, for the strictness cases.
func tag(num protowire.Number, typ protowire.Type) []byte { return protowire.AppendTag(nil, num, typ) }

func msg(num protowire.Number, body ...[]byte) []byte {
	return protowire.AppendBytes(tag(num, protowire.BytesType), bytes.Join(body, nil))
}

func varint(num protowire.Number, x uint64) []byte {
	return protowire.AppendVarint(tag(num, protowire.VarintType), x)
}

// strictCases are settings proto accepts (keeping the unknown field or
// enum number) and namewire must reject, at every level.
var strictCases = map[string][]byte{
	"unknown field":               varint(9, 1),
	"unknown field, bytes":        msg(9),
	"unknown fixed32":             protowire.AppendFixed32(tag(9, protowire.Fixed32Type), 1),
	"pod_zone as varint":          varint(4, 1),
	"policy: unknown field":       msg(1, varint(7, 1)),
	"policy: unknown enum":        msg(1, varint(2, 3)),
	"policy: negative enum":       msg(1, varint(5, uint64(1<<64-1))),
	"policy: enum as bytes":       msg(1, msg(4)),
	"rule: unknown field":         msg(1, msg(1, msg(4))),
	"rule: unknown action":        msg(1, msg(1, varint(2, 9))),
	"forward: unknown field":      msg(2, varint(4, 0)),
	"telemetry: unknown field":    msg(3, msg(3)),
	"query log: unknown field":    msg(3, msg(1, varint(4, 1))),
	"failing report: unknown":     msg(3, msg(2, varint(4, 1))),
	"failing report: bool as len": msg(3, msg(2, msg(1))),
}

func TestSettingsStrict(t *testing.T) {
	for name, in := range strictCases {
		t.Run(name, func(t *testing.T) {
			pb := new(meshdnsv1.AgentSettings)
			if err := proto.Unmarshal(in, pb); err != nil {
				t.Fatalf("proto rejects the case: %v", err)
			}
			if !unknownInside(pb.ProtoReflect()) {
				t.Fatalf("proto knows everything in %x", in)
			}
			err := new(namewire.AgentSettings).Unmarshal(in)
			if !errors.Is(err, namewire.ErrUnknownSetting) {
				t.Fatalf("Unmarshal: %v, want ErrUnknownSetting", err)
			}
			table := msg(3, in)
			if _, err := namewire.TableSettings(table); !errors.Is(err, namewire.ErrUnknownSetting) {
				t.Fatalf("TableSettings: %v, want ErrUnknownSetting", err)
			}
			if _, err := namewire.UnmarshalNameTable(table); !errors.Is(err, namewire.ErrUnknownSetting) {
				t.Fatalf("UnmarshalNameTable: %v, want ErrUnknownSetting", err)
			}
			if _, err := namewire.UnmarshalDelta(msg(5, in)); !errors.Is(err, namewire.ErrUnknownSetting) {
				t.Fatalf("UnmarshalDelta: %v, want ErrUnknownSetting", err)
			}
		})
	}
	for _, in := range []string{
		`{"policy": {"mode": 3}}`, `{"policy": {"mode": -1}}`, `{"policy": {"rules": [{"action": 7}]}}`,
		`{"policy": {"denyResponse": 2147483647}}`,
	} {
		t.Run(in, func(t *testing.T) {
			if err := protojson.Unmarshal([]byte(in), new(meshdnsv1.AgentSettings)); err != nil {
				t.Fatalf("protojson rejects the case: %v", err)
			}
			if _, err := namewire.DecodeJSONSettings([]byte(in)); !errors.Is(err, namewire.ErrUnknownSetting) {
				t.Fatalf("DecodeJSONSettings: %v, want ErrUnknownSetting", err)
			}
		})
	}
}

// unknownInside reports whether m or a message inside it holds unknown
// fields or an enum number its descriptor does not declare: what namewire
// rejects in settings and proto keeps.
func unknownInside(m protoreflect.Message) bool {
	if len(m.GetUnknown()) > 0 {
		return true
	}
	found := false
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		check := func(v protoreflect.Value) {
			switch fd.Kind() {
			case protoreflect.EnumKind:
				found = found || fd.Enum().Values().ByNumber(v.Enum()) == nil
			case protoreflect.MessageKind:
				found = found || unknownInside(v.Message())
			}
		}
		switch {
		case fd.IsMap():
			v.Map().Range(func(_ protoreflect.MapKey, v protoreflect.Value) bool {
				if fd.MapValue().Kind() == protoreflect.MessageKind {
					found = found || unknownInside(v.Message())
				}
				return !found
			})
		case fd.IsList():
			for i := range v.List().Len() {
				check(v.List().Get(i))
			}
		default:
			check(v)
		}
		return !found
	})
	return found
}

// compareStrict checks a namewire decode against proto's for a message
// that holds settings: namewire fails when proto fails, and may fail
// where proto succeeds only with ErrUnknownSetting, for a message holding
// something proto does not know.
func compareStrict(t *testing.T, in []byte, perr, err error, pm protoreflect.Message) (both bool) {
	t.Helper()
	switch {
	case perr != nil && err == nil:
		t.Fatalf("%x: proto error %v, namewire none", in, perr)
	case perr == nil && err != nil:
		if !errors.Is(err, namewire.ErrUnknownSetting) || !unknownInside(pm) {
			t.Fatalf("%x: namewire error %v, proto none", in, err)
		}
	}
	return perr == nil && err == nil
}

func TestUnsupported(t *testing.T) {
	tests := []struct {
		name     string
		settings *namewire.AgentSettings
		known    []string
		want     []string
	}{
		{name: "nil settings", settings: nil, known: nil, want: nil},
		{name: "requires nothing", settings: &namewire.AgentSettings{}, known: []string{"policy"}, want: nil},
		{name: "all known", settings: &namewire.AgentSettings{Requires: []string{"policy", "forwarding"}}, known: []string{"forwarding", "policy"}, want: nil},
		{name: "one unknown", settings: &namewire.AgentSettings{Requires: []string{"policy", "telemetry", "policy", "telemetry"}}, known: []string{"policy"}, want: []string{"telemetry"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, tc.settings.Unsupported(tc.known)); diff != "" {
				t.Fatalf("(-want +got):\n%s", diff)
			}
		})
	}
}

func FuzzSettingsWire(f *testing.F) {
	for _, c := range strictCases {
		f.Add(c)
	}
	r := rand.New(rand.NewPCG(21, 22))
	for range 3 {
		b, _ := proto.Marshal(randSettings(r))
		f.Add(b)
	}
	f.Add(append(msg(1, varint(5, 1)), msg(1, varint(5, 2), msg(1))...)) // two policies: merged
	f.Add(msg(4, []byte{0xff}))                                          // pod_zone not UTF-8
	f.Fuzz(func(t *testing.T, in []byte) {
		pb := new(meshdnsv1.AgentSettings)
		perr := proto.Unmarshal(in, pb)
		got := new(namewire.AgentSettings)
		err := got.Unmarshal(in)
		if !compareStrict(t, in, perr, err, pb.ProtoReflect()) {
			return
		}
		if diff := cmp.Diff(fromSettings(pb), got, equate); diff != "" {
			t.Fatalf("%x: (-proto +namewire):\n%s", in, diff)
		}
	})
}

func FuzzSettingsJSON(f *testing.F) {
	for _, s := range []string{
		`{}`, `null`, `{"podZone": "z", "pod_zone": "y"}`, `{"policy": {"mode": "POLICY_MODE_AUDIT", "outsideDefault": 2}}`,
		`{"policy": {"mode": 3}}`, `{"policy": {"mode": "3"}}`, `{"policy": {"mode": 1.0}}`, `{"policy": {"mode": null}}`,
		`{"policy": {"rules": [{"pattern": "*.example.com.", "action": "POLICY_ACTION_DENY"}, null]}}`,
		`{"forwarding": [{"domains": ["corp."], "upstreams": ["tls://1.2.3.4@dns.corp"]}]}`,
		`{"telemetry": {"queryLog": {"classes": ["all"], "sampleEvery": "10"}, "failing_report": {"enabled": true, "topN": 5}}}`,
		`{"telemetry": {"failingReport": {"enabled": 1}}}`, `{"telemetry": {"failingReport": {"enabled": truex}}}`,
		`{"requires": ["policy"], "unknown": 1}`, `{"policy": {}} x`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		// Read as protojson reads a NameTable's settings field: null
		// for none, else an AgentSettings object.
		pb := new(meshdnsv1.AgentSettings)
		var perr error
		if isNull := string(bytes.Trim(in, " \t\r\n")) == "null"; isNull {
			pb = nil
		} else {
			perr = protojson.Unmarshal(in, pb)
		}
		got, err := namewire.DecodeJSONSettings(in)
		if !compareStrict(t, in, perr, err, pb.ProtoReflect()) {
			return
		}
		var want *namewire.AgentSettings
		if pb != nil {
			want = fromSettings(pb)
		}
		if diff := cmp.Diff(want, got, equate); diff != "" {
			t.Fatalf("%q: (-protojson +namewire):\n%s", in, diff)
		}
	})
}
