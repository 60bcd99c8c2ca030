package namewire

import (
	"bytes"
	"unsafe"
)

// A table file repeats its port objects from name to name, byte for byte
// ({"name": "http", "port": 80, "protocol": "TCP"}), and reading them was
// a quarter of its conversion. The same bytes decode to the same value,
// so the wire walk remembers the last port object read at each index of
// a name's ports, and one that repeats it is compared, not decoded.

// portMemo is the last port object read at one index.
type portMemo struct {
	raw  []byte // its JSON, or empty for none
	port uint32
	// The name's and protocol's offsets and lengths in raw: the strings
	// of a Port read with jscan.borrow lie in the input, so the same
	// ones lie at the same offsets in a repeat. A port with an escaped
	// string is not remembered.
	name, protocol [2]int
}

// maxPortMemo bounds the indexes remembered, and the object's length.
const (
	maxPortMemo    = 4
	maxPortMemoLen = 256
)

// memoPort is port for the k-th port of a name, through s.memo when
// there is one (with s.borrow only).
func (s *jscan) memoPort(p *Port, info *NameInfo, k int) error {
	if s.memo == nil || k >= len(s.memo) {
		return s.port(p, info)
	}
	memo := &s.memo[k]
	s.ws()
	start := s.i
	if n := len(memo.raw); n > 0 && bytes.HasPrefix(s.b[start:], memo.raw) {
		obj := s.b[start : start+n]
		*p = Port{Name: within(obj, memo.name), Port: memo.port, Protocol: within(obj, memo.protocol)}
		s.i += n
		return nil
	}
	if err := s.port(p, info); err != nil {
		return err
	}
	obj := s.b[start:s.i]
	memo.raw = memo.raw[:0]
	name, ok1 := offset(obj, p.Name)
	protocol, ok2 := offset(obj, p.Protocol)
	if ok1 && ok2 && len(obj) <= maxPortMemoLen {
		memo.raw = append(memo.raw, obj...)
		memo.port, memo.name, memo.protocol = p.Port, name, protocol
	}
	return nil
}

// offset returns the offset and length of v in obj, if v's bytes lie
// there (or v is empty).
func offset(obj []byte, v string) ([2]int, bool) {
	if v == "" {
		return [2]int{}, true
	}
	if len(obj) == 0 {
		return [2]int{}, false
	}
	d := uintptr(unsafe.Pointer(unsafe.StringData(v))) - uintptr(unsafe.Pointer(&obj[0]))
	if d >= uintptr(len(obj)) || uintptr(len(v)) > uintptr(len(obj))-d {
		return [2]int{}, false
	}
	return [2]int{int(d), len(v)}, true
}

// within is the string of obj's bytes at at (offset, length), sharing
// them.
func within(obj []byte, at [2]int) string {
	if at[1] == 0 {
		return ""
	}
	return unsafe.String(&obj[at[0]], at[1])
}
