package namewire

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
)

// Answer is an agent's request after its first, an ACK or a NACK, as the
// control plane reads it. Every agent sends one per response, so it is
// decoded by hand into a value the stream reuses: no message, no strings,
// no reflection.
type Answer struct {
	Version  []byte // version_info: applied (ACK) or kept (NACK)
	Nonce    uint64 // response_nonce, when NonceOK
	NonceOK  bool   // response_nonce is a decimal number that fits in 64 bits
	RawNonce []byte // response_nonce as sent, for a log line
	// Nack: the request carries an error detail (read by the caller, with
	// the whole request: NACKs are rare).
	Nack bool
	// Rejected is rejected_version: a version the agent died running, NACKed
	// outside the response that carried it; or empty.
	Rejected []byte
}

var errInvalidUTF8 = errors.New("string field is not valid UTF-8")

// Decode reads b as a StreamNameTableRequest with the rules of the proto
// codec: fields in any order, the last of a repeated singular field wins,
// unknown fields skipped, strings valid UTF-8, malformed input an error.
// The lists of a reused Answer keep their capacity. An identity (meant for
// the first request only, and ignored after it) and an error detail are
// skipped without a look inside. failing is called with each occurrence of
// the failing-names report (proto merges them; each must be a valid
// message on its own, as two invalid halves can make a valid whole), and
// its error ends the decoding.
func (a *Answer) Decode(b []byte, failing func(v []byte) error) error {
	a.Version, a.RawNonce, a.Rejected = a.Version[:0], a.RawNonce[:0], a.Rejected[:0]
	a.Nonce, a.NonceOK, a.Nack = 0, false, false
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		if num > protowire.MaxValidNumber {
			return fmt.Errorf("field number %d out of range", num)
		}
		b = b[n:]
		if typ != protowire.BytesType {
			// Every field read here is length-delimited; like the proto
			// codec, a known field with another wire type is unknown.
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return protowire.ParseError(n)
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		switch num {
		case fieldRequestVersion:
			if !utf8.Valid(v) {
				return fmt.Errorf("version_info: %w", errInvalidUTF8)
			}
			a.Version = append(a.Version[:0], v...)
		case fieldRequestNonce:
			if !utf8.Valid(v) {
				return fmt.Errorf("response_nonce: %w", errInvalidUTF8)
			}
			a.RawNonce = append(a.RawNonce[:0], v...)
		case fieldRequestRejected:
			if !utf8.Valid(v) {
				return fmt.Errorf("rejected_version: %w", errInvalidUTF8)
			}
			a.Rejected = append(a.Rejected[:0], v...)
		case fieldRequestError:
			a.Nack = true
		case fieldRequestFailing:
			if err := failing(v); err != nil {
				return fmt.Errorf("failing: %w", err)
			}
		}
	}
	a.Nonce, a.NonceOK = parseNonce(a.RawNonce)
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
