package discovery

import (
	"fmt"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// wireCodec is the stream's codec: proto for what the agent sends, and for
// responses the raw bytes (a *rawResponse). A full table then reaches the
// agent as the bytes it keeps and converts name by name, instead of as a
// decoded NameTable (~40 MB at 100,000 names) it would marshal again.
// Named "proto", so the server sees the usual content type.
type wireCodec struct{}

func (wireCodec) Name() string { return "proto" }

func (wireCodec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("marshal %T: not a proto message", v)
	}
	b, err := proto.Marshal(m)
	if err != nil {
		return nil, err
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}, nil
}

func (wireCodec) Unmarshal(data mem.BufferSlice, v any) error {
	switch m := v.(type) {
	case *rawResponse:
		m.b = data.Materialize() // a copy the response owns
		return nil
	case proto.Message:
		return proto.Unmarshal(data.Materialize(), m)
	}
	return fmt.Errorf("unmarshal into %T: not a proto message", v)
}

// rawResponse is a StreamNameTableResponse as received.
type rawResponse struct{ b []byte }

// response is a StreamNameTableResponse with the full table left in wire
// form.
type response struct {
	version, nonce string
	full           []byte // the full table (wire form), when isFull
	isFull         bool
	delta          *meshdnsv1.NameTableDelta // or nil
}

// Field numbers of StreamNameTableResponse.
const (
	fieldResponseNonce = 2
	fieldResponseDelta = 4
)

// parseResponse reads a raw response; only a delta is decoded. As in
// proto, a later oneof field replaces an earlier one.
func parseResponse(b []byte) (*response, error) {
	r := new(response)
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, protowire.ParseError(n)
		}
		b = b[n:]
		if typ != protowire.BytesType || num < fieldResponseVer || num > fieldResponseDelta {
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return nil, protowire.ParseError(n)
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return nil, protowire.ParseError(n)
		}
		b = b[n:]
		switch num {
		case fieldResponseVer:
			r.version = string(v)
		case fieldResponseNonce:
			r.nonce = string(v)
		case fieldResponseFull:
			r.full, r.isFull, r.delta = v, true, nil
		case fieldResponseDelta:
			d := new(meshdnsv1.NameTableDelta)
			if err := proto.Unmarshal(v, d); err != nil {
				return nil, fmt.Errorf("delta: %w", err)
			}
			r.delta, r.full, r.isFull = d, nil, false
		}
	}
	return r, nil
}
