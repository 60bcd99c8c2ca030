package server

import (
	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers the "proto" codec we delegate to
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/meshdns/meshdns/controlplane/view"
)

// encoded is a response whose body was encoded once for its view; only the
// nonce is per agent. Protobuf fields may come in any order and a decoder
// merges them, so appending the nonce field to the shared bytes gives a
// valid StreamNameTableResponse without copying the table.
type encoded struct {
	p     *view.Prepared
	nonce string
}

const respNonce = 2 // StreamNameTableResponse.nonce

// codec sends encoded values as they are and hands everything else to the
// standard proto codec. It keeps the name "proto", so clients see the
// ordinary content type and use the generated code unchanged.
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
	tail := protowire.AppendTag(nil, respNonce, protowire.BytesType)
	tail = protowire.AppendString(tail, e.nonce)
	// SliceBuffer's Free is a no-op, so gRPC never recycles the shared bytes.
	return mem.BufferSlice{mem.SliceBuffer(e.p.Bytes), mem.SliceBuffer(tail)}, nil
}

func (c codec) Unmarshal(data mem.BufferSlice, v any) error { return c.proto.Unmarshal(data, v) }

func (c codec) Name() string { return "proto" }
