package server

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/meshdns/meshdns/internal/namewire"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// answer is an agent's request after its first: an ACK or a NACK. Every
// agent sends one per response, so the codec decodes it by hand
// (namewire.Answer) into a value the stream reuses: no message, no
// strings, no reflection. A NACK, which is rare and carries an error
// detail, is decoded whole as well.
type answer struct {
	version  []byte // version_info: applied (ACK) or kept (NACK)
	nonce    uint64 // response_nonce, when nonceOK
	nonceOK  bool   // response_nonce is a decimal number that fits in 64 bits
	rawNonce []byte // response_nonce as sent, for a log line
	// nack is the whole request when it carries an error detail, else nil.
	nack *meshdnsv1.StreamNameTableRequest
	// failing is the agent's failing-names report (failing.go), or nil.
	failing *meshdnsv1.FailingNames
}

// decode reads b as a StreamNameTableRequest with the rules of the proto
// codec (namewire.Answer.Decode). A failing-names report, sent about once
// a window, and a NACK are decoded whole by the proto codec.
func (a *answer) decode(b []byte) error {
	a.nack, a.failing = nil, nil
	w := namewire.Answer{Version: a.version, RawNonce: a.rawNonce}
	err := w.Decode(b, a.mergeFailing)
	a.version, a.rawNonce, a.nonce, a.nonceOK = w.Version, w.RawNonce, w.Nonce, w.NonceOK
	if err != nil {
		a.failing = nil
		return fmt.Errorf("decode request: %w", err)
	}
	if w.Nack {
		// Rare: decode the whole request (and so check the error detail
		// and any identity as the proto codec would).
		r := new(meshdnsv1.StreamNameTableRequest)
		if err := proto.Unmarshal(b, r); err != nil {
			return fmt.Errorf("decode request: %w", err)
		}
		a.nack = r
		a.failing = r.GetFailing()
	}
	return nil
}

// mergeFailing merges one occurrence of the failing-names report into
// a.failing, as proto merges a repeated embedded message.
func (a *answer) mergeFailing(v []byte) error {
	if a.failing == nil {
		a.failing = new(meshdnsv1.FailingNames)
	}
	return (proto.UnmarshalOptions{Merge: true}).Unmarshal(v, a.failing)
}
