package server

import (
	"strconv"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/meshdns/meshdns/internal/namewire"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

func marshalRequest(tb testing.TB, r *meshdnsv1.StreamNameTableRequest) []byte {
	tb.Helper()
	b, err := proto.Marshal(r)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// FuzzAnswer checks the hand decoder of ACKs and NACKs against the
// generated code: whatever proto.Unmarshal accepts, decode accepts with the
// same version, nonce, NACK and failing-names report; it never accepts a
// malformed message that has no identity (the field it skips unread).
func FuzzAnswer(f *testing.F) {
	// An ACK, a NACK, an ACK with an unknown field, a first request,
	// repeated fields (the last wins), a bad nonce, truncated input.
	f.Add(marshalRequest(f, &meshdnsv1.StreamNameTableRequest{VersionInfo: "0123456789abcdef", ResponseNonce: "42"}))
	f.Add(marshalRequest(f, &meshdnsv1.StreamNameTableRequest{VersionInfo: "v1", ResponseNonce: "7",
		ErrorDetail: &meshdnsv1.ErrorDetail{Code: 3, Message: "bad delta"}}))
	f.Add(append(marshalRequest(f, &meshdnsv1.StreamNameTableRequest{ResponseNonce: "1"}), 0xf8, 0x01, 0x05))
	f.Add(marshalRequest(f, &meshdnsv1.StreamNameTableRequest{Identity: &meshdnsv1.AgentIdentity{Namespace: "ns"}}))
	f.Add([]byte("\x12\x01a\x12\x01b\x1a\x013\x1a\x0218"))
	f.Add([]byte("\x1a\x03-12"))
	f.Add([]byte("\x12\x05ab"))
	// A report on an ACK, a report in two parts (proto merges them), a
	// report with a name that is not UTF-8.
	f.Add(marshalRequest(f, &meshdnsv1.StreamNameTableRequest{VersionInfo: "v1", ResponseNonce: "3",
		Failing: &meshdnsv1.FailingNames{WindowSeconds: 60, Names: []*meshdnsv1.FailingName{{Name: "a.example.", Rcode: 3, Count: 9}}}}))
	f.Add([]byte("\x1a\x013\x2a\x02\x08\x3c\x2a\x07\x12\x05\x0a\x01a\x10\x02"))
	f.Add([]byte("\x1a\x013\x2a\x05\x12\x03\x0a\x01\xff"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var a answer
		err := a.decode(b)
		var r meshdnsv1.StreamNameTableRequest
		perr := proto.Unmarshal(b, &r)
		if perr != nil {
			if err == nil && r.Identity == nil && !hasField(b, namewire.FieldRequestIdentity) {
				t.Fatalf("decode accepted what proto rejects: %v", perr)
			}
			return
		}
		if err != nil {
			t.Fatalf("decode rejected what proto accepts: %v", err)
		}
		if string(a.version) != r.GetVersionInfo() {
			t.Errorf("version %q, proto %q", a.version, r.GetVersionInfo())
		}
		if string(a.rawNonce) != r.GetResponseNonce() {
			t.Errorf("nonce %q, proto %q", a.rawNonce, r.GetResponseNonce())
		}
		n, perr := strconv.ParseUint(r.GetResponseNonce(), 10, 64)
		if a.nonceOK != (perr == nil) || a.nonce != n {
			t.Errorf("nonce %d (%v), ParseUint %d (%v)", a.nonce, a.nonceOK, n, perr)
		}
		if (a.nack != nil) != (r.ErrorDetail != nil) {
			t.Errorf("nack %v, proto error detail %v", a.nack != nil, r.ErrorDetail)
		}
		if a.nack != nil && !proto.Equal(a.nack, &r) {
			t.Errorf("nack %v, proto %v", a.nack, &r)
		}
		if (a.failing != nil) != (r.Failing != nil) || !proto.Equal(a.failing, r.Failing) {
			t.Errorf("failing %v, proto %v", a.failing, r.Failing)
		}
	})
}

// hasField reports whether b holds a field num at its top level, as far as
// it parses.
func hasField(b []byte, num int) bool {
	for len(b) > 0 {
		n, typ, k := protowire.ConsumeTag(b)
		if k < 0 {
			return false
		}
		if int(n) == num {
			return true
		}
		b = b[k:]
		k = protowire.ConsumeFieldValue(n, typ, b)
		if k < 0 {
			return false
		}
		b = b[k:]
	}
	return false
}

// TestAnswerAllocs: an ACK decodes into a reused answer without
// allocating.
func TestAnswerAllocs(t *testing.T) {
	b := marshalRequest(t, &meshdnsv1.StreamNameTableRequest{VersionInfo: "0123456789abcdef", ResponseNonce: "123456"})
	var a answer
	if err := a.decode(b); err != nil {
		t.Fatal(err)
	}
	if a.nonce != 123456 || !a.nonceOK || string(a.version) != "0123456789abcdef" || a.nack != nil {
		t.Fatalf("decoded %+v", a)
	}
	if n := testing.AllocsPerRun(100, func() { _ = a.decode(b) }); n != 0 {
		t.Errorf("%v allocations per ACK", n)
	}
}

func BenchmarkAnswer(b *testing.B) {
	msg := marshalRequest(b, &meshdnsv1.StreamNameTableRequest{VersionInfo: "0123456789abcdef", ResponseNonce: "123456"})
	b.Run("hand", func(b *testing.B) {
		var a answer
		b.ReportAllocs()
		for b.Loop() {
			if err := a.decode(msg); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("proto", func(b *testing.B) {
		r := new(meshdnsv1.StreamNameTableRequest)
		b.ReportAllocs()
		for b.Loop() {
			proto.Reset(r)
			if err := proto.Unmarshal(msg, r); err != nil {
				b.Fatal(err)
			}
			if _, err := strconv.ParseUint(r.GetResponseNonce(), 10, 64); err != nil {
				b.Fatal(err)
			}
		}
	})
}
