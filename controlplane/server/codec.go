package server

import (
	"encoding/binary"
	"errors"
	"fmt"

	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers the "proto" codec we delegate to
	"google.golang.org/grpc/mem"

	"github.com/meshdns/meshdns/controlplane/view"
	"github.com/meshdns/meshdns/internal/namewire"
)

// encoded is a response whose body was encoded once for its view; only the
// nonce, and an agent's settings, are per agent. Protobuf fields may come
// in any order and a decoder merges them, so appending the nonce field to
// the shared bytes gives a valid StreamNameTableResponse without copying
// the table. Everything gRPC needs to send it lives in this one allocation:
// the buffers it hands to gRPC point into it.
//
// With settings (withSettings), the response's version and the length of
// its table or delta differ per agent, so a small head is written per
// agent (version, tag and length of the full or delta field), then the
// view's shared body, then the settings field and the nonce. The agent
// reads a repeated full or delta field as replacing the first, not merging
// it (agent/discovery), so the settings go inside the one table field.
type encoded struct {
	p                *view.Prepared
	head, body, tail mem.SliceBuffer
	bufs             [3]mem.Buffer
	nbufs            int
	size             int            // bytes of the whole response
	tailBytes        [tailRoom]byte // the nonce field
	more             *sharedTail    // or nil
}

// sharedTail are the buffers of a response that carries an agent's
// settings: those are referenced, not copied (a policy's encoding is
// shared by the agents of that policy and can be 40 KB).
type sharedTail struct {
	inner, s1, s2 mem.SliceBuffer // added fields, then the settings' two pieces
	bufs          [6]mem.Buffer   // head, body, inner, s1, s2, tail
}

// maxVersion bounds the version of a response with settings: a view's
// (16 hex digits), "+", a settings version (16 hex digits), with room.
const maxVersion = 64

func newEncoded(p *view.Prepared, nonce uint64) *encoded {
	e := &encoded{p: p}
	e.body, e.tail = p.Bytes, namewire.AppendNonce(e.tailBytes[:0], nonce)
	// Pointers to the slices, so the interfaces need no allocations of
	// their own; SliceBuffer's Free is a no-op, so gRPC never recycles
	// the shared bytes.
	e.bufs = [3]mem.Buffer{&e.body, &e.tail}
	e.nbufs = 2
	e.size = len(e.body) + len(e.tail)
	return e
}

// tailRoom is what the nonce field takes.
const tailRoom = namewire.MaxNonceField

// headRoom is what the head of a response with settings may take: the
// version field, the tag and length of the table or delta.
const headRoom = 1 + 1 + maxVersion + 1 + binary.MaxVarintLen64

// withSettings is p sent with version p.Version.ID+"+"+settings (just the
// view's version when settings is "") and with buf[headRoom:] (fields of
// the table or delta: settings, the delta's base; or none) added to its
// table or delta. p.Bytes are the view's version field followed by the
// full or delta field (view.Prepared): only that field's body is shared.
// buf is ours (built per send): the head is written into its first
// headRoom bytes and the nonce into its spare capacity, so a response
// with settings costs two allocations, this buffer and the encoded.
// s1 and s2, when not empty, follow buf's fields (they end the settings
// field buf starts): they are sent from where they are, never copied or
// modified, at the cost of one allocation more.
func withSettings(p *view.Prepared, nonce uint64, settings string, buf, s1, s2 []byte) (*encoded, error) {
	inner := buf[headRoom:]
	added := len(inner) + len(s1) + len(s2)
	full, body, err := namewire.SplitResponse(p.Bytes)
	if err != nil {
		return nil, fmt.Errorf("prepared response: %w", err)
	}
	// The version: the view's, joined with the settings' when any.
	vlen := len(p.Version.ID)
	version := [3]string{p.Version.ID, settingsSep, settings}
	parts := version[:1]
	if settings != "" {
		parts = version[:]
		vlen += len(settingsSep) + len(settings)
	}
	if vlen > maxVersion {
		return nil, errors.New("prepared response: version too long")
	}
	e := &encoded{p: p}
	hlen := namewire.ResponseHeadSize(vlen, len(body)+added)
	h := namewire.AppendResponseHead(buf[headRoom-hlen:headRoom-hlen], full, len(body)+added, parts...)
	if len(h) != hlen {
		return nil, errors.New("response head: size mismatch")
	}
	e.head, e.body = h, body
	if len(s1)+len(s2) == 0 {
		e.tail = namewire.AppendNonce(inner, nonce)
		e.bufs = [3]mem.Buffer{&e.head, &e.body, &e.tail}
		e.nbufs = 3
		e.size = len(e.head) + len(e.body) + len(e.tail)
		return e, nil
	}
	e.tail = namewire.AppendNonce(e.tailBytes[:0], nonce)
	m := &sharedTail{inner: inner, s1: s1, s2: s2}
	m.bufs = [6]mem.Buffer{&e.head, &e.body, &m.inner, &m.s1, &m.s2, &e.tail}
	e.more = m
	e.size = len(e.head) + len(e.body) + added + len(e.tail)
	return e, nil
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
	if e.more != nil {
		return e.more.bufs[:], nil
	}
	return e.bufs[:e.nbufs], nil
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

// parts are the response's byte slices, in order, in dst.
func (e *encoded) parts(dst *[6][]byte) [][]byte {
	if e.more != nil {
		m := e.more
		*dst = [6][]byte{e.head, e.body, m.inner, m.s1, m.s2, e.tail}
		return dst[:]
	}
	if e.nbufs == 2 {
		dst[0], dst[1] = e.body, e.tail
		return dst[:2]
	}
	dst[0], dst[1], dst[2] = e.head, e.body, e.tail
	return dst[:3]
}
