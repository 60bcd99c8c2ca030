package dnstap

import (
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protowire"
)

// fields decodes one protobuf message into field number -> raw values
// (varints as uint64, fixed32 as uint32, bytes as []byte).
func fields(t testing.TB, b []byte) map[protowire.Number][]any {
	t.Helper()
	out := map[protowire.Number][]any{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			t.Fatalf("tag: %v", protowire.ParseError(n))
		}
		b = b[n:]
		var v any
		switch typ {
		case protowire.VarintType:
			v, n = protowire.ConsumeVarint(b)
		case protowire.Fixed32Type:
			v, n = protowire.ConsumeFixed32(b)
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
		default:
			t.Fatalf("field %d: unexpected wire type %d", num, typ)
		}
		if n < 0 {
			t.Fatalf("field %d: %v", num, protowire.ParseError(n))
		}
		out[num] = append(out[num], v)
		b = b[n:]
	}
	return out
}

func TestAppendPayload(t *testing.T) {
	qt := time.Unix(1700000000, 123456789)
	rt := qt.Add(41 * time.Microsecond)
	for _, tc := range []struct {
		name    string
		m       Message
		family  []any
		address []any
	}{
		{
			name:    "ipv4 client response",
			m:       Message{Type: ClientResponse, Protocol: UDP, QueryAddr: netip.MustParseAddrPort("10.1.2.3:40000"), ResponseAddr: netip.MustParseAddrPort("127.0.0.1:15053"), QueryTime: qt, ResponseTime: rt, QueryMessage: []byte{1, 2}, ResponseMessage: []byte{3, 4, 5}},
			family:  []any{uint64(familyINET)},
			address: []any{[]byte{10, 1, 2, 3}},
		},
		{
			name:    "ipv4-mapped is INET",
			m:       Message{Type: ClientQuery, Protocol: TCP, QueryAddr: netip.MustParseAddrPort("[::ffff:10.1.2.3]:40000"), QueryTime: qt, QueryMessage: []byte{1}},
			family:  []any{uint64(familyINET)},
			address: []any{[]byte{10, 1, 2, 3}},
		},
		{
			name:    "ipv6",
			m:       Message{Type: ClientQuery, Protocol: UDP, QueryAddr: netip.MustParseAddrPort("[fd00::1]:5353"), QueryTime: qt, QueryMessage: []byte{1}},
			family:  []any{uint64(familyINET6)},
			address: []any{netip.MustParseAddr("fd00::1").AsSlice()},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A prefix in b must stay as it was.
			b := AppendPayload([]byte("prefix"), "demo/web-0", "meshdns test", &tc.m)
			if string(b[:6]) != "prefix" {
				t.Fatalf("prefix overwritten: %q", b[:6])
			}
			top := fields(t, b[6:])
			if diff := cmp.Diff(map[protowire.Number][]any{
				fieldDnstapIdentity: {[]byte("demo/web-0")},
				fieldDnstapVersion:  {[]byte("meshdns test")},
				fieldDnstapType:     {uint64(dnstapTypeMessage)},
			}, map[protowire.Number][]any{
				fieldDnstapIdentity: top[fieldDnstapIdentity], fieldDnstapVersion: top[fieldDnstapVersion], fieldDnstapType: top[fieldDnstapType],
			}); diff != "" {
				t.Errorf("envelope (-want +got):\n%s", diff)
			}
			if len(top[fieldDnstapMessage]) != 1 {
				t.Fatalf("message fields: %d", len(top[fieldDnstapMessage]))
			}
			m := fields(t, top[fieldDnstapMessage][0].([]byte))
			want := map[protowire.Number][]any{
				fieldMsgType:           {uint64(tc.m.Type)},
				fieldMsgSocketFamily:   tc.family,
				fieldMsgSocketProtocol: {uint64(tc.m.Protocol)},
				fieldMsgQueryAddress:   tc.address,
				fieldMsgQueryPort:      {uint64(tc.m.QueryAddr.Port())},
				fieldMsgQueryTimeSec:   {uint64(qt.Unix())},
				fieldMsgQueryTimeNsec:  {uint32(qt.Nanosecond())},
				fieldMsgQueryMessage:   {tc.m.QueryMessage},
			}
			if tc.m.ResponseAddr.IsValid() {
				want[fieldMsgResponseAddress] = []any{tc.m.ResponseAddr.Addr().AsSlice()}
				want[fieldMsgResponsePort] = []any{uint64(tc.m.ResponseAddr.Port())}
			}
			if !tc.m.ResponseTime.IsZero() {
				want[fieldMsgResponseTimeSec] = []any{uint64(rt.Unix())}
				want[fieldMsgResponseTimeNsec] = []any{uint32(rt.Nanosecond())}
			}
			if tc.m.ResponseMessage != nil {
				want[fieldMsgResponseMessage] = []any{tc.m.ResponseMessage}
			}
			if diff := cmp.Diff(want, m); diff != "" {
				t.Errorf("message (-want +got):\n%s", diff)
			}
		})
	}
}

// A message long enough that its length takes two varint bytes is moved
// behind the length intact.
func TestAppendPayloadLongMessage(t *testing.T) {
	long := make([]byte, 300)
	for i := range long {
		long[i] = byte(i)
	}
	b := AppendPayload(nil, "", "", &Message{Type: ClientResponse, ResponseMessage: long})
	top := fields(t, b)
	m := fields(t, top[fieldDnstapMessage][0].([]byte))
	if diff := cmp.Diff([]any{long}, m[fieldMsgResponseMessage]); diff != "" {
		t.Errorf("response message (-want +got):\n%s", diff)
	}
}

func BenchmarkAppendPayload(b *testing.B) {
	m := &Message{Type: ClientResponse, Protocol: UDP, QueryAddr: netip.MustParseAddrPort("10.1.2.3:40000"),
		ResponseAddr: netip.MustParseAddrPort("127.0.0.1:15053"), QueryTime: time.Now(), ResponseTime: time.Now(),
		QueryMessage: make([]byte, 40), ResponseMessage: make([]byte, 120)}
	buf := make([]byte, 0, 512)
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendPayload(buf[:0], "demo/web-0", "meshdns", m)
	}
}
