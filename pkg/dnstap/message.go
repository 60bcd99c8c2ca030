// Package dnstap writes dnstap (the DNS field's log format: dnstap.proto
// messages in Frame Streams) to a collector over a unix socket or TCP,
// without the protobuf runtime: the message is encoded with protowire and
// the framing is written here, so the agent that links it stays small.
//
// A Writer never blocks its caller: frames wait in a bounded queue, are
// dropped and counted when the collector is slow or gone, and the
// connection is dialled again with a backoff.
package dnstap

import (
	"net/netip"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// MessageType is dnstap.Message.Type.
type MessageType uint8

// The message types this package writes; the numbers are dnstap.proto's.
const (
	AuthQuery         MessageType = 1
	AuthResponse      MessageType = 2
	ClientQuery       MessageType = 5
	ClientResponse    MessageType = 6
	ForwarderQuery    MessageType = 7
	ForwarderResponse MessageType = 8
)

// Protocol is dnstap.SocketProtocol.
type Protocol uint8

// Socket protocols (dnstap.proto's numbers).
const (
	UDP Protocol = 1
	TCP Protocol = 2
	// DOT is DNS over TLS.
	DOT Protocol = 3
)

// Message is one dnstap.Message. Zero fields are left out of the
// encoding.
type Message struct {
	Type     MessageType
	Protocol Protocol
	// QueryAddr is the address that sent the query (for a CLIENT_* message
	// the pod's application), ResponseAddr the one that answered; their
	// family (INET or INET6) is QueryAddr's, else ResponseAddr's.
	QueryAddr, ResponseAddr netip.AddrPort
	QueryTime, ResponseTime time.Time
	// QueryMessage and ResponseMessage are DNS messages in wire form.
	QueryMessage, ResponseMessage []byte
}

// Field numbers of dnstap.proto.
const (
	fieldDnstapIdentity = 1
	fieldDnstapVersion  = 2
	fieldDnstapMessage  = 14
	fieldDnstapType     = 15

	fieldMsgType             = 1
	fieldMsgSocketFamily     = 2
	fieldMsgSocketProtocol   = 3
	fieldMsgQueryAddress     = 4
	fieldMsgResponseAddress  = 5
	fieldMsgQueryPort        = 6
	fieldMsgResponsePort     = 7
	fieldMsgQueryTimeSec     = 8
	fieldMsgQueryTimeNsec    = 9
	fieldMsgQueryMessage     = 10
	fieldMsgResponseTimeSec  = 12
	fieldMsgResponseTimeNsec = 13
	fieldMsgResponseMessage  = 14

	dnstapTypeMessage = 1
	familyINET        = 1
	familyINET6       = 2
)

// AppendPayload appends to b the dnstap.Dnstap message (type MESSAGE)
// carrying m, with identity and version when not empty: the payload of
// one data frame.
func AppendPayload(b []byte, identity, version string, m *Message) []byte {
	if identity != "" {
		b = protowire.AppendTag(b, fieldDnstapIdentity, protowire.BytesType)
		b = protowire.AppendString(b, identity)
	}
	if version != "" {
		b = protowire.AppendTag(b, fieldDnstapVersion, protowire.BytesType)
		b = protowire.AppendString(b, version)
	}
	b = protowire.AppendTag(b, fieldDnstapMessage, protowire.BytesType)
	// The message is appended in place, then moved up behind its length:
	// no scratch buffer.
	start := len(b)
	b = m.append(b)
	n := len(b) - start
	ls := protowire.SizeVarint(uint64(n))
	b = append(b, make([]byte, ls)...)
	copy(b[start+ls:], b[start:start+n])
	protowire.AppendVarint(b[start:start], uint64(n))
	b = protowire.AppendTag(b, fieldDnstapType, protowire.VarintType)
	return protowire.AppendVarint(b, dnstapTypeMessage)
}

func (m *Message) append(b []byte) []byte {
	b = appendVarint(b, fieldMsgType, uint64(m.Type))
	family := m.QueryAddr.Addr()
	if !family.IsValid() {
		family = m.ResponseAddr.Addr()
	}
	if family.IsValid() {
		f := uint64(familyINET)
		if !family.Unmap().Is4() {
			f = familyINET6
		}
		b = appendVarint(b, fieldMsgSocketFamily, f)
	}
	if m.Protocol != 0 {
		b = appendVarint(b, fieldMsgSocketProtocol, uint64(m.Protocol))
	}
	if a := m.QueryAddr; a.IsValid() {
		b = appendBytes(b, fieldMsgQueryAddress, a.Addr().Unmap().AsSlice())
		b = appendVarint(b, fieldMsgQueryPort, uint64(a.Port()))
	}
	if a := m.ResponseAddr; a.IsValid() {
		b = appendBytes(b, fieldMsgResponseAddress, a.Addr().Unmap().AsSlice())
		b = appendVarint(b, fieldMsgResponsePort, uint64(a.Port()))
	}
	if !m.QueryTime.IsZero() {
		b = appendTime(b, fieldMsgQueryTimeSec, fieldMsgQueryTimeNsec, m.QueryTime)
	}
	if m.QueryMessage != nil {
		b = appendBytes(b, fieldMsgQueryMessage, m.QueryMessage)
	}
	if !m.ResponseTime.IsZero() {
		b = appendTime(b, fieldMsgResponseTimeSec, fieldMsgResponseTimeNsec, m.ResponseTime)
	}
	if m.ResponseMessage != nil {
		b = appendBytes(b, fieldMsgResponseMessage, m.ResponseMessage)
	}
	return b
}

func appendVarint(b []byte, num protowire.Number, v uint64) []byte {
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func appendBytes(b []byte, num protowire.Number, v []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

// appendTime writes t as dnstap does: uint64 seconds and fixed32
// nanoseconds.
func appendTime(b []byte, sec, nsec protowire.Number, t time.Time) []byte {
	b = appendVarint(b, sec, uint64(t.Unix()))
	b = protowire.AppendTag(b, nsec, protowire.Fixed32Type)
	return protowire.AppendFixed32(b, uint32(t.Nanosecond()))
}
