package server

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/meshdns/meshdns/internal/namewire"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// answer is an agent's request after its first: an ACK or a NACK. Every
// agent sends one per response, so the codec decodes it by hand into a
// value the stream reuses: no message, no strings, no reflection. A NACK,
// which is rare and carries an error detail, is decoded whole as well.
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

var errInvalidUTF8 = errors.New("string field is not valid UTF-8")

// decode reads b as a StreamNameTableRequest with the rules of the proto
// codec: fields in any order, the last of a repeated singular field wins,
// unknown fields skipped, strings valid UTF-8, malformed input an error.
// An identity (meant for the first request only, and ignored after it) is
// skipped without a look inside. A failing-names report, sent about once a
// window, is decoded whole by the proto codec.
func (a *answer) decode(b []byte) error {
	a.version, a.rawNonce = a.version[:0], a.rawNonce[:0]
	a.nonce, a.nonceOK, a.nack, a.failing = 0, false, nil, nil
	nack := false
	all := b
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("decode request: %w", protowire.ParseError(n))
		}
		if num > protowire.MaxValidNumber {
			return fmt.Errorf("decode request: field number %d out of range", num)
		}
		b = b[n:]
		if typ != protowire.BytesType {
			// Every field we read is length-delimited; like the proto
			// codec, a known field with another wire type is unknown.
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return fmt.Errorf("decode request: %w", protowire.ParseError(n))
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return fmt.Errorf("decode request: %w", protowire.ParseError(n))
		}
		b = b[n:]
		switch num {
		case namewire.FieldRequestVersion:
			if !utf8.Valid(v) {
				return fmt.Errorf("decode request: version_info: %w", errInvalidUTF8)
			}
			a.version = append(a.version[:0], v...)
		case namewire.FieldRequestNonce:
			if !utf8.Valid(v) {
				return fmt.Errorf("decode request: response_nonce: %w", errInvalidUTF8)
			}
			a.rawNonce = append(a.rawNonce[:0], v...)
		case namewire.FieldRequestError:
			nack = true
		case namewire.FieldRequestFailing:
			// Several occurrences merge, as in proto, and each must be
			// a valid message on its own (two invalid halves can make
			// a valid whole).
			if a.failing == nil {
				a.failing = new(meshdnsv1.FailingNames)
			}
			if err := (proto.UnmarshalOptions{Merge: true}).Unmarshal(v, a.failing); err != nil {
				a.failing = nil
				return fmt.Errorf("decode request: failing: %w", err)
			}
		}
	}
	a.nonce, a.nonceOK = parseNonce(a.rawNonce)
	if nack {
		// Rare: decode the whole request (and so check the error detail
		// and any identity as the proto codec would).
		r := new(meshdnsv1.StreamNameTableRequest)
		if err := proto.Unmarshal(all, r); err != nil {
			return fmt.Errorf("decode request: %w", err)
		}
		a.nack = r
		a.failing = r.GetFailing()
	}
	return nil
}

// parseNonce parses a nonce as strconv.ParseUint(s, 10, 64) would.
func parseNonce(b []byte) (uint64, bool) {
	if len(b) == 0 {
		return 0, false
	}
	var n uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if n > (1<<64-1-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	return n, true
}
