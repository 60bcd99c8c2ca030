package namewire

import (
	"bufio"
	"errors"
	"fmt"
	"io"

	"google.golang.org/protobuf/encoding/protowire"
)

// Response is a StreamNameTableResponse with the full table left in wire
// form: in memory (Full), or copied elsewhere by the Spool it was read
// with (Spooled).
type Response struct {
	Version, Nonce string
	Full           []byte // the full table (wire form), when IsFull and not Spooled
	IsFull         bool
	Spooled        bool   // the full table went to the spool
	Delta          *Delta // or nil
	abort          func() // undoes the spool's copy, or nil
}

// A Spool takes a full table of size bytes off the stream, with copy
// (which copies it to w field by field and returns its shape), instead
// of the reader holding it in memory. It returns how to undo the copy
// when the table is not applied after all (a later field replaces it, or
// the response is cut). A nil undo with a nil error is "not taken": the
// table is read into memory. An error ends the read.
type Spool func(version string, size int, copy func(w io.Writer) (*Shape, error)) (undo func(), err error)

// DropFull forgets a full table read before (a later oneof field replaces
// it, or it is not applied), undoing a spool's copy.
func (r *Response) DropFull() {
	if r.abort != nil {
		r.abort()
	}
	r.Full, r.Spooled, r.IsFull, r.abort = nil, false, false, nil
}

// Keep makes a spooled table the caller's: DropFull no longer undoes its
// copy.
func (r *Response) Keep() { r.abort = nil }

// ReadResponse reads a response from r; only a delta is decoded. With a
// spool, a full table that follows the version (the order a
// StreamNameTableResponse is marshalled in) is offered to it rather than
// read into memory. As in proto, a later oneof field replaces an earlier
// one.
func ReadResponse(r io.Reader, spool Spool) (_ *Response, err error) {
	p := &pbReader{r: bufio.NewReaderSize(r, 32<<10), left: -1}
	resp := new(Response)
	defer func() {
		if err != nil {
			resp.DropFull() // no copy left behind
		}
	}()
	sawVersion := false
	for {
		num, n, err := p.nextBytes(func(num protowire.Number) bool {
			return num >= FieldResponseVersion && num <= FieldResponseDelta
		})
		if errors.Is(err, io.EOF) {
			return resp, nil
		}
		if err != nil {
			return nil, err
		}
		switch num {
		case FieldResponseVersion, FieldResponseNonce:
			b, err := p.take(n)
			if err != nil {
				return nil, err
			}
			if num == FieldResponseVersion {
				resp.Version, sawVersion = string(b), true
			} else {
				resp.Nonce = string(b)
			}
		case FieldResponseFull:
			resp.DropFull()
			resp.Delta, resp.IsFull = nil, true
			if spool != nil && sawVersion {
				undo, err := spool(resp.Version, int(n), func(w io.Writer) (*Shape, error) { return p.copyTable(w, n) })
				if err != nil {
					return nil, err
				}
				if undo != nil {
					resp.Spooled, resp.abort = true, undo
					continue
				}
			}
			if resp.Full, err = p.take(n); err != nil {
				return nil, err
			}
			if resp.Full == nil {
				resp.Full = []byte{}
			}
		case FieldResponseDelta:
			b, err := p.take(n)
			if err != nil {
				return nil, err
			}
			d, err := UnmarshalDelta(b)
			if err != nil {
				return nil, fmt.Errorf("delta: %w", err)
			}
			resp.DropFull()
			resp.Delta = d
		}
	}
}

// AppendFullHead appends the head of a StreamNameTableResponse holding a
// full table of size bytes: its version and the tag and length of the
// table, which follows it.
func AppendFullHead(b []byte, version string, size int) []byte {
	b = protowire.AppendTag(b, FieldResponseVersion, protowire.BytesType)
	b = protowire.AppendString(b, version)
	b = protowire.AppendTag(b, FieldResponseFull, protowire.BytesType)
	return protowire.AppendVarint(b, uint64(size))
}
