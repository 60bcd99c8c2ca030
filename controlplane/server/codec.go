package server

import (
	"strconv"

	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers the "proto" codec we delegate to
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/meshdns/meshdns/controlplane/view"
	"github.com/meshdns/meshdns/internal/namewire"
)

// encoded is a response whose body was encoded once for its view; only the
// nonce is per agent. Protobuf fields may come in any order and a decoder
// merges them, so appending the nonce field to the shared bytes gives a
// valid StreamNameTableResponse without copying the table. Everything gRPC
// needs to send it lives in this one allocation: the buffers it hands to
// gRPC point into it.
type encoded struct {
	p          *view.Prepared
	body, tail mem.SliceBuffer
	bufs       [2]mem.Buffer
	tailBytes  [1 + 1 + 20]byte // tag, length, up to 20 decimal digits
}

const respNonce = namewire.FieldResponseNonce // StreamNameTableResponse.nonce

func newEncoded(p *view.Prepared, nonce uint64) *encoded {
	e := &encoded{p: p}
	t := protowire.AppendTag(e.tailBytes[:0], respNonce, protowire.BytesType)
	t = append(t, 0)
	t = strconv.AppendUint(t, nonce, 10)
	t[1] = byte(len(t) - 2) // at most 20 digits: a one-byte varint
	e.body, e.tail = p.Bytes, t
	// Pointers to the slices, so the interfaces need no allocations of
	// their own; SliceBuffer's Free is a no-op, so gRPC never recycles
	// the shared bytes.
	e.bufs = [2]mem.Buffer{&e.body, &e.tail}
	return e
}

// codec sends encoded values as they are, decodes answers by hand
// (answer.go), and hands everything else to the standard proto codec. It
// keeps the name "proto", so clients see the ordinary content type and use
// the generated code unchanged.
type codec struct {
	proto encoding.CodecV2
}

var _ encoding.CodecV2 = codec{}

func newCodec() codec { return codec{proto: encoding.GetCodecV2("proto")} }

func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	e, ok := v.(*encoded)
	if !ok {
		return c.proto.Marshal(v)
	}
	return e.bufs[:], nil
}

func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	a, ok := v.(*answer)
	if !ok {
		return c.proto.Unmarshal(data, v)
	}
	if len(data) == 1 {
		return a.decode(data[0].ReadOnlyData())
	}
	b := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer b.Free()
	return a.decode(b.ReadOnlyData())
}

func (c codec) Name() string { return "proto" }
