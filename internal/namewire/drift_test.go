package namewire_test

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/meshdns/meshdns/internal/namewire"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// A field added to proto/meshdns/v1 must not be skipped by the agent
// without anything failing: the agent reads and writes the protocol with
// this package, not with the generated code. TestDescriptorDrift walks the
// generated descriptors and, for every field of every message namewire
// handles (and every value of every enum), builds a message with only that
// field set and checks that namewire has a struct field for it, decodes
// it, encodes it to the generated code's bytes and reads its JSON forms,
// as far as namewire does each for that message.

// root is a message namewire handles, and how.
type root struct {
	msg proto.Message // an empty generated message
	// decode decodes a marshalled message into the namewire value (as
	// convert makes it from the generated one), or is nil.
	decode func(t testing.TB, b []byte) (any, error)
	// convert is the namewire value of a generated message.
	convert func(t testing.TB, m proto.Message) any
	encode  func(v any) []byte          // or nil
	json    func(b []byte) (any, error) // or nil: namewire does not read its JSON form
}

func roots() []root {
	conv := func(new func() any) func(testing.TB, proto.Message) any {
		return func(t testing.TB, m proto.Message) any {
			t.Helper()
			v := new()
			if err := convert(m.ProtoReflect(), v); err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	return []root{
		{
			msg:    &meshdnsv1.NameTable{},
			decode: func(_ testing.TB, b []byte) (any, error) { return namewire.UnmarshalNameTable(b) },
			convert: func(t testing.TB, m proto.Message) any {
				nt := conv(func() any { return new(namewire.NameTable) })(t, m).(*namewire.NameTable)
				if nt.Table == nil {
					nt.Table = map[string]*namewire.NameInfo{} // as UnmarshalNameTable makes it
				}
				return nt
			},
			encode: func(v any) []byte { return v.(*namewire.NameTable).Marshal() },
		},
		{
			msg: &meshdnsv1.NameInfo{},
			decode: func(_ testing.TB, b []byte) (any, error) {
				info := new(namewire.NameInfo)
				if err := namewire.CheckNameInfo(b); err != nil {
					return nil, err
				}
				return info, info.Unmarshal(b)
			},
			convert: conv(func() any { return new(namewire.NameInfo) }),
			encode:  func(v any) []byte { return v.(*namewire.NameInfo).Append(nil) },
			json: func(b []byte) (any, error) {
				info := new(namewire.NameInfo)
				return info, info.DecodeJSON(b)
			},
		},
		{
			msg: &meshdnsv1.AgentSettings{},
			decode: func(_ testing.TB, b []byte) (any, error) {
				s := new(namewire.AgentSettings)
				return s, s.Unmarshal(b)
			},
			convert: conv(func() any { return new(namewire.AgentSettings) }),
			encode:  func(v any) []byte { return v.(*namewire.AgentSettings).Append(nil) },
			json:    func(b []byte) (any, error) { return namewire.DecodeJSONSettings(b) },
		},
		{
			msg: &meshdnsv1.NameTableDelta{},
			decode: func(t testing.TB, b []byte) (any, error) {
				d, err := namewire.UnmarshalDelta(b)
				if err != nil {
					return nil, err
				}
				return deltaValue(t, d), nil
			},
			convert: func(t testing.TB, m proto.Message) any {
				return deltaValue(t, conv(func() any { return new(namewire.Delta) })(t, m).(*namewire.Delta))
			},
		},
		{
			msg:     &meshdnsv1.StreamNameTableRequest{},
			convert: conv(func() any { return new(namewire.Request) }),
			encode:  func(v any) []byte { return v.(*namewire.Request).Append(nil) },
		},
	}
}

// responseFields are StreamNameTableResponse's fields, which the agent's
// stream reader (agent/discovery) takes one by one with namewire's
// numbers; a field added to the response must be added here and there.
var responseFields = map[protoreflect.Name]protoreflect.FieldNumber{
	"version_info": namewire.FieldResponseVersion,
	"nonce":        namewire.FieldResponseNonce,
	"full":         namewire.FieldResponseFull,
	"delta":        namewire.FieldResponseDelta,
}

// notRead are the messages of the package no namewire code handles
// directly, and why.
var notRead = map[protoreflect.FullName]string{
	"meshdns.v1.StreamNameTableResponse": "read field by field by agent/discovery (responseFields)",
}

func TestDescriptorDrift(t *testing.T) {
	reached := map[protoreflect.FullName]bool{}
	for _, r := range roots() {
		md := r.msg.ProtoReflect().Descriptor()
		reached[md.FullName()] = true
		t.Run(string(md.Name()), func(t *testing.T) {
			for _, path := range fieldPaths(md, nil, reached) {
				leaf := path[len(path)-1]
				for _, val := range leafValues(leaf) {
					name := pathName(md, path)
					if leaf.Kind() == protoreflect.EnumKind {
						name += "=" + string(leaf.Enum().Values().ByNumber(val).Name())
					}
					t.Run(name, func(t *testing.T) { checkField(t, r, path, val) })
				}
			}
		})
	}

	resp := (&meshdnsv1.StreamNameTableResponse{}).ProtoReflect().Descriptor()
	for i := range resp.Fields().Len() {
		fd := resp.Fields().Get(i)
		if num, ok := responseFields[fd.Name()]; !ok || num != fd.Number() {
			t.Errorf("%s (field %d): the agent's stream reader does not know it (namewire.FieldResponse* and agent/discovery)", fd.FullName(), fd.Number())
		}
		if fd.Message() != nil && !reached[fd.Message().FullName()] {
			t.Errorf("%s: its message %s is read by no namewire code", fd.FullName(), fd.Message().FullName())
		}
	}
	if len(responseFields) != resp.Fields().Len() {
		t.Errorf("responseFields lists %d fields, %s has %d", len(responseFields), resp.FullName(), resp.Fields().Len())
	}

	// Every message of the package is handled or listed with a reason.
	files := []protoreflect.FileDescriptor{
		meshdnsv1.File_meshdns_v1_nametable_proto, meshdnsv1.File_meshdns_v1_discovery_proto, meshdnsv1.File_meshdns_v1_settings_proto,
	}
	for _, f := range files {
		for i := range f.Messages().Len() {
			name := f.Messages().Get(i).FullName()
			if !reached[name] && notRead[name] == "" {
				t.Errorf("message %s is handled by no namewire code: add it to a namewire type (and to roots or a root's fields), or to notRead with the reason", name)
			}
		}
	}
}

// fieldPaths returns the path to every field inside md, depth first,
// marking the messages it passes through in reached.
func fieldPaths(md protoreflect.MessageDescriptor, prefix []protoreflect.FieldDescriptor, reached map[protoreflect.FullName]bool) [][]protoreflect.FieldDescriptor {
	var out [][]protoreflect.FieldDescriptor
	for i := range md.Fields().Len() {
		fd := md.Fields().Get(i)
		path := append(slices.Clone(prefix), fd)
		out = append(out, path)
		sub := fd.Message()
		if fd.IsMap() {
			sub = fd.MapValue().Message()
		}
		if sub != nil {
			reached[sub.FullName()] = true
			out = append(out, fieldPaths(sub, path, reached)...)
		}
	}
	return out
}

func pathName(md protoreflect.MessageDescriptor, path []protoreflect.FieldDescriptor) string {
	parts := []string{string(md.Name())}
	for _, fd := range path {
		parts = append(parts, fmt.Sprintf("%s(%d)", fd.Name(), fd.Number()))
	}
	return strings.Join(parts, ".")
}

// leafValues are the values a leaf field is set to, one test each: every
// declared non-zero value of an enum, one value of anything else (the
// zero value marks a message or list to be present with one element).
func leafValues(fd protoreflect.FieldDescriptor) []protoreflect.EnumNumber {
	if fd.Kind() != protoreflect.EnumKind {
		return []protoreflect.EnumNumber{0}
	}
	var out []protoreflect.EnumNumber
	vals := fd.Enum().Values()
	for i := range vals.Len() {
		if n := vals.Get(i).Number(); n != 0 {
			out = append(out, n)
		}
	}
	return out
}

// setPath sets the field at path in m: the messages on the way present,
// the leaf to a non-zero value (enum to e).
func setPath(m protoreflect.Message, path []protoreflect.FieldDescriptor, e protoreflect.EnumNumber) {
	fd := path[0]
	if len(path) > 1 {
		var sub protoreflect.Message
		switch {
		case fd.IsMap():
			sub = m.Mutable(fd).Map().Mutable(protoreflect.ValueOfString("k").MapKey()).Message()
		case fd.IsList():
			sub = m.Mutable(fd).List().AppendMutable().Message()
		default:
			sub = m.Mutable(fd).Message()
		}
		setPath(sub, path[1:], e)
		return
	}
	one := func(fd protoreflect.FieldDescriptor, newMsg func() protoreflect.Value) protoreflect.Value {
		switch fd.Kind() {
		case protoreflect.StringKind:
			return protoreflect.ValueOfString("x")
		case protoreflect.BoolKind:
			return protoreflect.ValueOfBool(true)
		case protoreflect.Uint32Kind:
			return protoreflect.ValueOfUint32(300)
		case protoreflect.Uint64Kind:
			return protoreflect.ValueOfUint64(1 << 40)
		case protoreflect.Int32Kind:
			return protoreflect.ValueOfInt32(-3)
		case protoreflect.EnumKind:
			return protoreflect.ValueOfEnum(e)
		case protoreflect.MessageKind:
			return newMsg()
		}
		panic(fmt.Sprintf("%s has kind %s: teach the test", fd.FullName(), fd.Kind()))
	}
	switch {
	case fd.IsMap():
		mp := m.Mutable(fd).Map()
		mp.Set(protoreflect.ValueOfString("k").MapKey(), one(fd.MapValue(), mp.NewValue))
	case fd.IsList():
		l := m.Mutable(fd).List()
		l.Append(one(fd, l.NewElement))
	default:
		m.Set(fd, one(fd, func() protoreflect.Value { return m.NewField(fd) }))
	}
}

// checkField checks namewire against the generated code for one message
// of r's type with only the field at path set.
func checkField(t *testing.T, r root, path []protoreflect.FieldDescriptor, e protoreflect.EnumNumber) {
	m := r.msg.ProtoReflect().New()
	setPath(m, path, e)
	pb := m.Interface()
	want := r.convert(t, pb)
	b, err := deterministic.Marshal(pb)
	if err != nil {
		t.Fatal(err)
	}
	if r.decode != nil {
		got, err := r.decode(t, b)
		if err != nil {
			t.Fatalf("namewire does not decode %x: %v", b, err)
		}
		if diff := cmp.Diff(want, got, equate); diff != "" {
			t.Fatalf("namewire decodes %x differently (-proto +namewire):\n%s", b, diff)
		}
	}
	if r.encode != nil {
		if got := r.encode(want); !bytes.Equal(got, b) {
			t.Fatalf("namewire marshals\n%x, proto\n%x", got, b)
		}
	}
	if r.json != nil {
		for _, opts := range []protojson.MarshalOptions{{}, {UseProtoNames: true}, {UseEnumNumbers: true}} {
			j, err := opts.Marshal(pb)
			if err != nil {
				t.Fatal(err)
			}
			got, err := r.json(j)
			if err != nil {
				t.Fatalf("namewire does not read %s: %v", j, err)
			}
			if diff := cmp.Diff(want, got, equate); diff != "" {
				t.Fatalf("namewire reads %s differently (-protojson +namewire):\n%s", j, diff)
			}
		}
	}
}
