package server

import (
	"strconv"
	"testing"
	"time"
	"unsafe"

	"google.golang.org/protobuf/proto"

	"github.com/meshdns/meshdns/controlplane/view"
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

// TestAnswerDecode: an ACK, a NACK and failing-names reports decode as
// the generated code decodes them (the hand decoder under it is fuzzed
// against the generated code in internal/namewire).
func TestAnswerDecode(t *testing.T) {
	tests := []struct {
		name string
		req  []byte
	}{
		{"ack", marshalRequest(t, &meshdnsv1.StreamNameTableRequest{VersionInfo: "0123456789abcdef", ResponseNonce: "42"})},
		{"nack", marshalRequest(t, &meshdnsv1.StreamNameTableRequest{VersionInfo: "v1", ResponseNonce: "7",
			ErrorDetail: &meshdnsv1.ErrorDetail{Code: 3, Message: "bad delta"}})},
		{"report on an ack", marshalRequest(t, &meshdnsv1.StreamNameTableRequest{VersionInfo: "v1", ResponseNonce: "3",
			Failing: &meshdnsv1.FailingNames{WindowSeconds: 60, Names: []*meshdnsv1.FailingName{{Name: "a.example.", Rcode: 3, Count: 9}}}})},
		{"report in two parts", []byte("\x1a\x013\x2a\x02\x08\x3c\x2a\x07\x12\x05\x0a\x01a\x10\x02")},
		{"report and nack", marshalRequest(t, &meshdnsv1.StreamNameTableRequest{VersionInfo: "v1", ResponseNonce: "3",
			ErrorDetail: &meshdnsv1.ErrorDetail{Code: 3}, Failing: &meshdnsv1.FailingNames{WindowSeconds: 60}})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r meshdnsv1.StreamNameTableRequest
			if err := proto.Unmarshal(tt.req, &r); err != nil {
				t.Fatal(err)
			}
			var a answer
			if err := a.decode(tt.req); err != nil {
				t.Fatalf("decode: %v", err)
			}
			if string(a.version) != r.GetVersionInfo() || string(a.rawNonce) != r.GetResponseNonce() {
				t.Errorf("version %q nonce %q, proto %q %q", a.version, a.rawNonce, r.GetVersionInfo(), r.GetResponseNonce())
			}
			if (a.nack != nil) != (r.ErrorDetail != nil) || (a.nack != nil && !proto.Equal(a.nack, &r)) {
				t.Errorf("nack %v, proto %v", a.nack, &r)
			}
			if (a.failing != nil) != (r.Failing != nil) || !proto.Equal(a.failing, r.Failing) {
				t.Errorf("failing %v, proto %v", a.failing, r.Failing)
			}
		})
	}
	// A report whose name is not UTF-8 fails the request, as in proto.
	var a answer
	if err := a.decode([]byte("\x1a\x013\x2a\x05\x12\x03\x0a\x01\xff")); err == nil || a.failing != nil {
		t.Errorf("a report not UTF-8 decoded: %v, %v", err, a.failing)
	}
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

// TestAckKeepsViewsVersion: an ACK of the version an agent was sent
// keeps the view's string rather than a copy, so an ACK allocates
// nothing and an idle agent holds no version string of its own.
func TestAckKeepsViewsVersion(t *testing.T) {
	views, err := view.New(view.Config{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Views: views})
	if err != nil {
		t.Fatal(err)
	}
	v := &view.Version{ID: "0123456789abcdef", Published: time.Now()}
	var ans answer
	if err := ans.decode(marshalRequest(t, &meshdnsv1.StreamNameTableRequest{VersionInfo: v.ID, ResponseNonce: "1"})); err != nil {
		t.Fatal(err)
	}
	a := &agent{}
	ack := func() {
		a.nonce, a.answered, a.acked = 1, 0, ""
		a.ring[1%ringSize] = inflight{nonce: 1, version: v}
		s.answer(a, &ans)
	}
	ack()
	if a.acked != v.ID || unsafe.StringData(a.acked) != unsafe.StringData(v.ID) {
		t.Errorf("acked %q is a copy of the view's %q", a.acked, v.ID)
	}
	if n := testing.AllocsPerRun(100, ack); n != 0 {
		t.Errorf("%v allocations per ACK", n)
	}
}
