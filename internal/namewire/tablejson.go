package namewire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
)

// The JSON form of a whole NameTable (a table file) is read as protojson
// reads it, by the same scanner as a NameInfo, but from a stream: a
// 100,000-name file (6 to 20 MB) is never held whole, only a window of it
// that grows to the largest name's object.

// maxJSONUnit bounds the window: one name's object, or the zone list.
// unitAhead is what the window holds ahead before a unit is read, when
// the stream has more.
const (
	maxJSONUnit = 64 << 20
	unitAhead   = 4 << 10
)

// WalkJSONTable reads the JSON form of a NameTable from r: the fields
// "table" and "authoritative_zones" (or "authoritativeZones"), each at
// most once, nothing after the object; "settings" is refused (settings
// come from the control plane). It calls name with each name of
// the table and its NameInfo decoded into info (reused: valid during the
// call only), and zones with the zone list where it appears. A nil name
// skips the NameInfos by their brackets and strings only, without
// checking them (a first pass for the zones: the pass that decodes the
// names checks them).
func WalkJSONTable(r io.Reader, info *NameInfo, name func(host string, info *NameInfo) error, zones func([]string) error) error {
	st := &jstream{r: r, b: make([]byte, 0, 32<<10)}
	var each func([]byte, *NameInfo) error
	if name != nil {
		each = func(host []byte, info *NameInfo) error { return name(string(host), info) }
	}
	return st.table(info, each, zones)
}

// WalkJSONTableWire is WalkJSONTable yielding each name's NameInfo in wire
// form (host and info valid during the call only): the conversion of a
// table file, without a string allocated per field or per name.
func WalkJSONTableWire(r io.Reader, name func(host, info []byte) error, zones func([]string) error) error {
	st := &jstream{r: r, b: make([]byte, 0, 32<<10), borrow: true}
	var buf []byte
	return st.table(new(NameInfo), func(host []byte, info *NameInfo) error {
		buf = info.Append(buf[:0])
		return name(host, buf)
	}, zones)
}

// SkimJSONTable reads the zones of the JSON form of a NameTable from r
// and counts its names, as WalkJSONTable does without name: the
// NameInfos are skipped by their brackets and strings only, unchecked.
func SkimJSONTable(r io.Reader) (zones []string, names int, err error) {
	st := &jstream{r: r, b: make([]byte, 0, 32<<10), count: &names}
	err = st.table(nil, nil, func(z []string) error {
		zones = z
		return nil
	})
	return zones, names, err
}

// table reads the table object (WalkJSONTable).
func (st *jstream) table(info *NameInfo, name func(host []byte, info *NameInfo) error, zones func([]string) error) error {
	if err := st.unit(func(s *jscan) error {
		if s.peek() != '{' {
			return s.unexpected("an object")
		}
		s.i++
		return nil
	}); err != nil {
		return err
	}
	var sawTable, sawZones bool
	for first := true; ; first = false {
		var key string
		end := false
		if err := st.unit(func(s *jscan) (err error) {
			key, end, err = s.member(first, '}')
			return err
		}); err != nil {
			return err
		}
		if end {
			break
		}
		switch key {
		case "table":
			if sawTable {
				return errors.New(`duplicate field "table"`)
			}
			sawTable = true
			if err := st.names(info, name); err != nil {
				return err
			}
		case "authoritative_zones", "authoritativeZones":
			if sawZones {
				return fmt.Errorf("duplicate field %q", key)
			}
			sawZones = true
			var list []string
			if err := st.unit(func(s *jscan) (err error) {
				list = nil
				if !s.null() {
					list, err = s.strings(nil)
				}
				return err
			}); err != nil {
				return fmt.Errorf("%s: %w", key, err)
			}
			if err := zones(list); err != nil {
				return err
			}
		case "settings":
			// The agent's settings come from the control plane; a table
			// file that sets them would be silently half applied.
			return errors.New(`field "settings": a table file carries no agent settings`)
		default:
			return fmt.Errorf("unknown field %q", key)
		}
	}
	return st.end()
}

// names reads the table field's value: null (no names, as protojson reads
// it) or an object of names.
func (st *jstream) names(info *NameInfo, name func([]byte, *NameInfo) error) error {
	isNull := false
	if err := st.unit(func(s *jscan) error {
		if isNull = s.null(); isNull {
			return nil
		}
		if s.peek() != '{' {
			return s.unexpected("an object")
		}
		s.i++
		return nil
	}); err != nil {
		return fmt.Errorf("table: %w", err)
	}
	if isNull {
		return nil
	}
	for first := true; ; first = false {
		var host []byte
		end, decoded := false, false
		if err := st.unit(func(s *jscan) (err error) {
			decoded = false
			if host, end, err = s.memberBytes(first, '}'); err != nil || end {
				return err
			}
			if name == nil {
				// Only the object's end is looked for: the pass that
				// decodes the names checks them.
				return s.skipObject()
			}
			// Decoded where it lies: finding its end first, then
			// decoding it, took a third of a table file's conversion.
			s.borrow = st.borrow
			if s.borrow {
				s.memo = st.memo[:]
			}
			decoded = true
			return info.readJSON(s)
		}); err != nil {
			if decoded {
				return fmt.Errorf("table[%q]: %w", host, err)
			}
			return fmt.Errorf("table: %w", err)
		}
		if end {
			return nil
		}
		if st.count != nil {
			*st.count++
		}
		if name == nil {
			continue
		}
		if err := name(host, info); err != nil {
			return err
		}
	}
}

// member reads what comes before an object's member: "," unless first,
// the key and ":"; or the object's closing brace (end).
func (s *jscan) member(first bool, closing byte) (key string, end bool, err error) {
	b, end, err := s.memberBytes(first, closing)
	return string(b), end, err
}

// memberBytes is member returning the key's bytes (see strBytes).
func (s *jscan) memberBytes(first bool, closing byte) (key []byte, end bool, err error) {
	c := s.peek()
	if c == closing {
		s.i++
		return nil, true, nil
	}
	if !first {
		if c != ',' {
			return nil, false, s.unexpected(`"," or "}"`)
		}
		s.i++
	}
	if s.peek() != '"' {
		return nil, false, s.unexpected("a field name")
	}
	if key, err = s.strBytes(); err != nil {
		return nil, false, err
	}
	if s.peek() != ':' {
		return nil, false, s.unexpected(`":"`)
	}
	s.i++
	return key, false, nil
}

// skip reads one value of any kind, checking its syntax only.
func (s *jscan) skip() error {
	switch c := s.peek(); c {
	case '{':
		return s.object(func([]byte) error { return s.skip() })
	case '[':
		return s.array(s.skip)
	case '"':
		_, err := s.strBytes()
		return err
	case 't', 'f', 'n':
		for _, lit := range []string{"true", "false", "null"} {
			if len(s.b)-s.i >= len(lit) && string(s.b[s.i:s.i+len(lit)]) == lit {
				s.i += len(lit)
				return nil
			}
		}
		return s.unexpected("a value")
	case 0:
		return s.unexpected("a value")
	}
	_, err := s.number()
	return err
}

// skipObject reads past one object, finding its end by its brackets and
// strings only, without checking its syntax: for an object that is
// decoded strictly next. Any other value is read by skip.
func (s *jscan) skipObject() error {
	if s.peek() != '{' {
		return s.skip()
	}
	// Only quotes, backslashes and brackets matter, and most of a table
	// file is none of them: a word of eight bytes at a time is taken at
	// once, unless it has a backslash or may close the object.
	k := skimmer{escaped: -1}
	i := s.i
	for ; i+8 <= len(s.b); i += 8 {
		x := binary.LittleEndian.Uint64(s.b[i:])
		if k.escaped < i && exactZeros(x^(ones*'\\')) == 0 {
			// Byte n of quotes is the number of quotes in bytes 0
			// to n; the bytes after an odd number of them (counting
			// a string open before) are in a string.
			quotes := exactZeros(x^(ones*'"')) >> 7 * ones
			// Without bits 1, 2 and 5, each bracket reads as 'Y' (as
			// do 'Y', 'y', '_' and DEL): most words have none.
			if exactZeros(x&^(ones*0x26)^(ones*'Y')) == 0 {
				k.inStr ^= quotes >> 56 & 1
				continue
			}
			in := (quotes + k.inStr*ones) & ones
			y := x &^ (ones * 0x20) // '{' and '}' read as '[' and ']'
			open := bits.OnesCount64(exactZeros(y^(ones*'[')) >> 7 &^ in)
			closing := bits.OnesCount64(exactZeros(y^(ones*']')) >> 7 &^ in)
			if closing == 0 || closing < k.depth {
				k.depth += open - closing
				k.inStr ^= quotes >> 56 & 1
				continue
			}
		}
		for j := i; j < i+8; j++ {
			if k.step(s.b[j], j) {
				s.i = j + 1
				return nil
			}
		}
	}
	for ; i < len(s.b); i++ {
		if k.step(s.b[i], i) {
			s.i = i + 1
			return nil
		}
	}
	s.i = len(s.b)
	return errEOF
}

// skimmer is skipObject's state: in a string or not, the depth outside
// strings.
type skimmer struct {
	depth int
	// escaped is the index of the byte after a backslash in a string,
	// which ends nothing.
	escaped int
	inStr   uint64 // 1 in a string
}

// step takes the byte c at index j, and reports whether it closed the
// object.
func (k *skimmer) step(c byte, j int) bool {
	if k.inStr == 1 {
		switch {
		case j == k.escaped:
		case c == '"':
			k.inStr = 0
		case c == '\\':
			k.escaped = j + 1
		}
		return false
	}
	switch c {
	case '"':
		k.inStr = 1
	case '{', '[':
		k.depth++
	case '}', ']':
		k.depth--
		return k.depth == 0
	}
	return false
}

// jstream is a window on a JSON stream: b[i:] is read but not yet
// consumed.
type jstream struct {
	r   io.Reader
	b   []byte
	i   int
	off int // the offset of b in the stream
	eof bool
	s   jscan // the scanner of unit
	// count, or nil, counts the names the table's walk reads.
	count *int
	// borrow decodes the NameInfos with jscan.borrow (and jscan.memo).
	borrow bool
	memo   [maxPortMemo]portMemo
}

// unit runs read on what is buffered. A read that fails near the end of
// the window, or that ends right at it (a number or literal could go on),
// ran out of input: more is read and it runs again from the same place.
func (st *jstream) unit(read func(s *jscan) error) error {
	// Most units are far smaller than this: with at least as much
	// ahead they are seldom cut, and seldom read twice.
	if !st.eof && len(st.b)-st.i < unitAhead {
		if err := st.fill(); err != nil {
			return err
		}
	}
	for {
		// One scanner, reused: a new one per name was 100,000 small
		// allocations per pass over a large file.
		st.s = jscan{b: st.b[st.i:], at: st.off + st.i}
		s := &st.s
		err := read(s)
		if st.eof {
			if err == nil {
				st.i += s.i
			}
			return err
		}
		if err == nil && s.peek() != 0 {
			st.i += s.i
			return nil
		}
		// What a scanner reads ahead of its position is at most a
		// \uXXXX\uXXXX pair or a literal.
		if err != nil && s.i < len(s.b)-16 {
			return err
		}
		if ferr := st.fill(); ferr != nil {
			return ferr
		}
	}
}

// fill reads more of the stream into the window, growing it when what is
// not consumed fills half of it.
func (st *jstream) fill() error {
	n := copy(st.b, st.b[st.i:])
	st.off += st.i
	st.b, st.i = st.b[:n], 0
	if n > cap(st.b)/2 {
		if cap(st.b) >= maxJSONUnit {
			return fmt.Errorf("a value of more than %d bytes", maxJSONUnit)
		}
		st.b = append(make([]byte, 0, 2*cap(st.b)), st.b...)
	}
	m, err := io.ReadAtLeast(st.r, st.b[n:cap(st.b)], 1)
	st.b = st.b[:n+m]
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		st.eof = true
		return nil
	}
	return err
}

// end checks that nothing but white space follows the object.
func (st *jstream) end() error {
	for {
		s := &jscan{b: st.b[st.i:], at: st.off + st.i}
		if s.ws(); s.i < len(s.b) { // not peek: a NUL byte is data too
			return s.errorf("data after the table object")
		}
		if st.eof {
			return nil
		}
		st.i = len(st.b)
		if err := st.fill(); err != nil {
			return err
		}
	}
}
