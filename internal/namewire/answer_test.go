package namewire_test

import (
	"strconv"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

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

// FuzzAnswer checks the control plane's decoder of ACKs and NACKs against
// the generated code: whatever proto.Unmarshal accepts, Decode accepts with
// the same version, nonce, NACK and failing-names report (each occurrence
// merged by proto, as the control plane does); it never accepts a
// malformed message that has no identity or error detail (the fields it
// skips unread).
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
	f.Add([]byte("\x1a\x1a00010000000000000000000000")) // a nonce out of range
	f.Add([]byte("\x12\x05ab"))
	// A report on an ACK, a report in two parts (proto merges them), a
	// report with a name that is not UTF-8.
	f.Add(marshalRequest(f, &meshdnsv1.StreamNameTableRequest{VersionInfo: "v1", ResponseNonce: "3",
		Failing: &meshdnsv1.FailingNames{WindowSeconds: 60, Names: []*meshdnsv1.FailingName{{Name: "a.example.", Rcode: 3, Count: 9}}}}))
	f.Add([]byte("\x1a\x013\x2a\x02\x08\x3c\x2a\x07\x12\x05\x0a\x01a\x10\x02"))
	f.Add([]byte("\x1a\x013\x2a\x05\x12\x03\x0a\x01\xff"))
	// A crash report after a restart: the version kept, the one rejected.
	f.Add(marshalRequest(f, &meshdnsv1.StreamNameTableRequest{VersionInfo: "v1", RejectedVersion: "v2",
		ErrorDetail: &meshdnsv1.ErrorDetail{Code: 10, Message: "the agent died within 30s of applying version v2; restored v1"}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		var a namewire.Answer
		var failing *meshdnsv1.FailingNames
		err := a.Decode(b, func(v []byte) error {
			if failing == nil {
				failing = new(meshdnsv1.FailingNames)
			}
			return (proto.UnmarshalOptions{Merge: true}).Unmarshal(v, failing)
		})
		var r meshdnsv1.StreamNameTableRequest
		perr := proto.Unmarshal(b, &r)
		if perr != nil {
			if err == nil && !hasField(b, requestField("identity")) && !hasField(b, requestField("error_detail")) {
				t.Fatalf("decode accepted what proto rejects: %v", perr)
			}
			return
		}
		if err != nil {
			t.Fatalf("decode rejected what proto accepts: %v", err)
		}
		if string(a.Version) != r.GetVersionInfo() {
			t.Errorf("version %q, proto %q", a.Version, r.GetVersionInfo())
		}
		if string(a.RawNonce) != r.GetResponseNonce() {
			t.Errorf("nonce %q, proto %q", a.RawNonce, r.GetResponseNonce())
		}
		n, perr := strconv.ParseUint(r.GetResponseNonce(), 10, 64)
		if a.NonceOK != (perr == nil) || (perr == nil && a.Nonce != n) {
			t.Errorf("nonce %d (%v), ParseUint %d (%v)", a.Nonce, a.NonceOK, n, perr)
		}
		if string(a.Rejected) != r.GetRejectedVersion() {
			t.Errorf("rejected %q, proto %q", a.Rejected, r.GetRejectedVersion())
		}
		if a.Nack != (r.ErrorDetail != nil) {
			t.Errorf("nack %v, proto error detail %v", a.Nack, r.ErrorDetail)
		}
		if (failing != nil) != (r.Failing != nil) || !proto.Equal(failing, r.Failing) {
			t.Errorf("failing %v, proto %v", failing, r.Failing)
		}
	})
}

// hasField reports whether b holds a field num at its top level, as far as
// it parses.
// requestField is the number of StreamNameTableRequest's field name.
func requestField(name protoreflect.Name) int {
	return int((&meshdnsv1.StreamNameTableRequest{}).ProtoReflect().Descriptor().Fields().ByName(name).Number())
}

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
