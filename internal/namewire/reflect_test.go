package namewire_test

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/meshdns/meshdns/internal/namewire"
)

// The tests compare namewire with the generated code through two helpers
// driven by the generated descriptors, so that a field added to the proto
// reaches every test without editing it: randMessage sets every field of
// a message (and of the messages inside it) to random values, and
// convert copies a generated message into the namewire type field by
// field, matching names, and fails on a proto field namewire has no
// struct field for.

// randMessage fills m with random values: each field set or not, every
// enum to a value its descriptor declares.
func randMessage(r *rand.Rand, m protoreflect.Message) {
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if fd.ContainingOneof() != nil || r.IntN(4) == 0 {
			continue // the messages namewire decodes have no oneof
		}
		switch {
		case fd.IsMap():
			mp := m.Mutable(fd).Map()
			for range r.IntN(4) {
				mp.Set(protoreflect.ValueOfString(randString(r)).MapKey(), randValue(r, m, fd.MapValue(), func() protoreflect.Value { return mp.NewValue() }))
			}
		case fd.IsList():
			l := m.Mutable(fd).List()
			for range r.IntN(4) {
				l.Append(randValue(r, m, fd, l.NewElement))
			}
		default:
			m.Set(fd, randValue(r, m, fd, func() protoreflect.Value { return m.NewField(fd) }))
		}
	}
}

// randValue is a random value of fd's kind; newMsg makes an empty message
// of fd's type for message fields.
func randValue(r *rand.Rand, parent protoreflect.Message, fd protoreflect.FieldDescriptor, newMsg func() protoreflect.Value) protoreflect.Value {
	switch fd.Kind() {
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(randString(r))
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(r.IntN(2) == 0)
	case protoreflect.Uint32Kind:
		return protoreflect.ValueOfUint32(randUint32(r))
	case protoreflect.Uint64Kind:
		if r.IntN(2) == 0 {
			return protoreflect.ValueOfUint64(r.Uint64())
		}
		return protoreflect.ValueOfUint64(uint64(randUint32(r)))
	case protoreflect.Int32Kind:
		codes := []int32{0, 3, 9, -1, 1 << 30, -1 << 31}
		return protoreflect.ValueOfInt32(codes[r.IntN(len(codes))])
	case protoreflect.EnumKind:
		vals := fd.Enum().Values()
		return protoreflect.ValueOfEnum(vals.Get(r.IntN(vals.Len())).Number())
	case protoreflect.MessageKind:
		v := newMsg()
		randMessage(r, v.Message())
		return v
	}
	panic(fmt.Sprintf("randValue: %s has kind %s: teach the test", fd.FullName(), fd.Kind()))
}

// goName is how namewire names the Go field of a proto field: its
// camel-cased name, initialisms in capitals (instance_id is InstanceID),
// compared without case or underscores.
func goName(s string) string { return strings.ToLower(strings.ReplaceAll(s, "_", "")) }

// convert copies the generated message m into dst, a pointer to the
// namewire type of the same message, without any of the code under test.
// Every field of m must have a struct field of the same name in dst and
// every exported struct field a proto field: an error names the first
// that does not.
func convert(m protoreflect.Message, dst any) error {
	return convertTo(m, reflect.ValueOf(dst).Elem())
}

func convertTo(m protoreflect.Message, dst reflect.Value) error {
	md := m.Descriptor()
	byName := map[string]reflect.Value{}
	t := dst.Type()
	for i := range t.NumField() {
		if t.Field(i).IsExported() {
			byName[goName(t.Field(i).Name)] = dst.Field(i)
		}
	}
	fields := md.Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		f, ok := byName[goName(string(fd.Name()))]
		if !ok {
			return fmt.Errorf("%s (field %d): namewire.%s has no field for it", fd.FullName(), fd.Number(), t.Name())
		}
		delete(byName, goName(string(fd.Name())))
		if !m.Has(fd) {
			continue
		}
		if err := convertField(m.Get(fd), fd, f); err != nil {
			return err
		}
	}
	for name := range byName {
		return fmt.Errorf("namewire.%s has field %q that %s does not", t.Name(), name, md.FullName())
	}
	return nil
}

func convertField(v protoreflect.Value, fd protoreflect.FieldDescriptor, dst reflect.Value) error {
	switch {
	case fd.IsMap():
		if dst.Type() == reflect.TypeFor[[]namewire.RawName]() {
			// A delta's upserts stay marshalled, in the order of the
			// deterministic marshalling (by key).
			mp := v.Map()
			var keys []string
			mp.Range(func(k protoreflect.MapKey, _ protoreflect.Value) bool { keys = append(keys, k.String()); return true })
			slices.Sort(keys)
			var out []namewire.RawName
			for _, k := range keys {
				b, err := deterministic.Marshal(mp.Get(protoreflect.ValueOfString(k).MapKey()).Message().Interface())
				if err != nil {
					return err
				}
				out = append(out, namewire.RawName{Host: k, Info: b})
			}
			dst.Set(reflect.ValueOf(out))
			return nil
		}
		if dst.Kind() != reflect.Map {
			return fmt.Errorf("%s: namewire's field is a %s, not a map", fd.FullName(), dst.Type())
		}
		out := reflect.MakeMap(dst.Type())
		var err error
		v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
			ev := reflect.New(dst.Type().Elem()).Elem()
			if err = convertValue(mv, fd.MapValue(), ev); err != nil {
				return false
			}
			out.SetMapIndex(reflect.ValueOf(k.String()), ev)
			return true
		})
		dst.Set(out)
		return err
	case fd.IsList():
		if dst.Kind() != reflect.Slice {
			return fmt.Errorf("%s: namewire's field is a %s, not a slice", fd.FullName(), dst.Type())
		}
		l := v.List()
		out := reflect.MakeSlice(dst.Type(), l.Len(), l.Len())
		for i := range l.Len() {
			if err := convertValue(l.Get(i), fd, out.Index(i)); err != nil {
				return err
			}
		}
		dst.Set(out)
		return nil
	}
	return convertValue(v, fd, dst)
}

// convertValue converts one value (an element of a list or map, or a
// singular field's) of fd's kind.
func convertValue(v protoreflect.Value, fd protoreflect.FieldDescriptor, dst reflect.Value) error {
	want := map[protoreflect.Kind]reflect.Kind{
		protoreflect.StringKind: reflect.String, protoreflect.BoolKind: reflect.Bool,
		protoreflect.Uint32Kind: reflect.Uint32, protoreflect.Uint64Kind: reflect.Uint64,
		protoreflect.Int32Kind: reflect.Int32, protoreflect.EnumKind: reflect.Int32,
	}[fd.Kind()]
	if fd.Kind() == protoreflect.MessageKind {
		elem := dst
		if dst.Kind() == reflect.Pointer {
			dst.Set(reflect.New(dst.Type().Elem()))
			elem = dst.Elem()
		}
		if elem.Kind() != reflect.Struct {
			return fmt.Errorf("%s: namewire's field is a %s, not a message", fd.FullName(), dst.Type())
		}
		return convertTo(v.Message(), elem)
	}
	if want == reflect.Invalid || dst.Kind() != want {
		return fmt.Errorf("%s: a %s in namewire's %s", fd.FullName(), fd.Kind(), dst.Type())
	}
	switch fd.Kind() {
	case protoreflect.StringKind:
		dst.SetString(v.String())
	case protoreflect.BoolKind:
		dst.SetBool(v.Bool())
	case protoreflect.Uint32Kind, protoreflect.Uint64Kind:
		dst.SetUint(v.Uint())
	case protoreflect.Int32Kind:
		dst.SetInt(v.Int())
	case protoreflect.EnumKind:
		dst.SetInt(int64(v.Enum()))
	}
	return nil
}

// mustConvert is convert for messages whose types are known to match.
func mustConvert[T any](m proto.Message) *T {
	out := new(T)
	if err := convert(m.ProtoReflect(), out); err != nil {
		panic(err)
	}
	return out
}
