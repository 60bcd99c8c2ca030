package namewire

import (
	"errors"
	"fmt"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// jscan reads JSON held whole in memory, strictly (RFC 8259, but for one
// leniency of protojson's in numbers, see number) and with protojson's
// string rules.
type jscan struct {
	b []byte
	i int
	// at is the offset of b in the whole input, for errors.
	at int
	// borrow makes str return strings that share b's bytes (valid while b
	// is): for a NameInfo appended to the wire form at once.
	borrow bool
	// memo, or nil, remembers port objects (memoPort); with borrow only.
	memo []portMemo
}

var errEOF = errors.New("unexpected end of JSON")

func (s *jscan) errorf(format string, args ...any) error {
	return fmt.Errorf("offset %d: %s", s.at+s.i, fmt.Sprintf(format, args...))
}

// ws skips white space.
func (s *jscan) ws() {
	// Most bytes there are above space: one comparison rules them out.
	for s.i < len(s.b) && s.b[s.i] <= ' ' && isSpace(s.b[s.i]) {
		s.i++
	}
}

// peek returns the next byte after white space, or 0 at the end.
func (s *jscan) peek() byte {
	s.ws()
	if s.i == len(s.b) {
		return 0
	}
	return s.b[s.i]
}

// null consumes a null literal if one is next.
func (s *jscan) null() bool {
	if s.peek() != 'n' {
		return false
	}
	if len(s.b)-s.i >= 4 && string(s.b[s.i:s.i+4]) == "null" {
		s.i += 4
		return true
	}
	return false
}

// object reads an object, calling member with each key (valid during the
// call); member reads the value.
func (s *jscan) object(member func(key []byte) error) error {
	if s.peek() != '{' {
		return s.unexpected("an object")
	}
	s.i++
	for first := true; ; first = false {
		key, end, err := s.memberBytes(first, '}')
		if err != nil || end {
			return err
		}
		if err := member(key); err != nil {
			return err
		}
	}
}

// array reads an array, calling elem for each element; elem reads it.
func (s *jscan) array(elem func() error) error {
	if s.peek() != '[' {
		return s.unexpected("an array")
	}
	s.i++
	for first := true; ; first = false {
		if more, err := s.nextElem(first); err != nil || !more {
			return err
		}
		if err := elem(); err != nil {
			return err
		}
	}
}

// strings reads an array of strings, appending them to into.
func (s *jscan) strings(into []string) ([]string, error) {
	err := s.array(func() error {
		v, err := s.str()
		into = append(into, v)
		return err
	})
	return into, err
}

func (s *jscan) unexpected(want string) error {
	if s.i >= len(s.b) {
		return fmt.Errorf("want %s: %w", want, errEOF)
	}
	return s.errorf("want %s, got %q", want, s.b[s.i])
}

// str reads a string: UTF-8, no control characters, only JSON's escapes,
// surrogates only in pairs.
func (s *jscan) str() (string, error) {
	b, err := s.strBytes()
	if s.borrow && len(b) > 0 {
		return unsafe.String(&b[0], len(b)), err
	}
	return string(b), err
}

// shared is str for a field whose values repeat from name to name
// (NameInfo.sharedStr); borrowed strings cost nothing to make, so they
// are not looked up.
func (s *jscan) shared(m *NameInfo) (string, error) {
	if s.borrow {
		return s.str()
	}
	b, err := s.strBytes()
	if err != nil {
		return "", err
	}
	return m.sharedStr(b, "string")
}

// strBytes is str returning the string's bytes: a part of the input when
// it holds no escape, else a new slice.
func (s *jscan) strBytes() ([]byte, error) {
	if s.peek() != '"' {
		return nil, s.unexpected("a string")
	}
	s.i++
	start := s.i
	// The common case, a string of printable ASCII without escapes, is
	// found eight bytes at a time and needs no UTF-8 check.
	s.i = plainASCII(s.b, s.i)
	if s.i < len(s.b) && s.b[s.i] == '"' {
		s.i++
		return s.b[start : s.i-1], nil
	}
	// Then bytes of any kind up to the first escape or control.
	for s.i < len(s.b) {
		c := s.b[s.i]
		if c == '"' {
			v := s.b[start:s.i]
			if !utf8.Valid(v) {
				return nil, s.errorf("invalid UTF-8 in string")
			}
			s.i++
			return v, nil
		}
		if c == '\\' || c < ' ' {
			break
		}
		s.i++
	}
	out := append([]byte(nil), s.b[start:s.i]...)
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			if !utf8.Valid(out) {
				return nil, s.errorf("invalid UTF-8 in string")
			}
			return out, nil
		case c < ' ':
			return nil, s.errorf("invalid character %q in string", c)
		case c != '\\':
			out = append(out, c)
			s.i++
			continue
		}
		if s.i+1 >= len(s.b) {
			return nil, errEOF
		}
		esc := s.b[s.i+1]
		s.i += 2
		switch esc {
		case '"', '\\', '/':
			out = append(out, esc)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := s.hex4()
			if !ok {
				return nil, s.errorf(`invalid \u escape in string`)
			}
			if utf16.IsSurrogate(r) {
				// Only a high surrogate followed by an escaped low one.
				if s.i+1 >= len(s.b) || s.b[s.i] != '\\' || s.b[s.i+1] != 'u' {
					return nil, s.errorf("lone surrogate in string")
				}
				s.i += 2
				r2, ok := s.hex4()
				if r = utf16.DecodeRune(r, r2); !ok || r == utf8.RuneError {
					return nil, s.errorf("invalid surrogate pair in string")
				}
			}
			out = utf8.AppendRune(out, r)
		default:
			return nil, s.errorf("invalid escape %q in string", esc)
		}
	}
	return nil, errEOF
}

// hex4 reads the four hex digits of a \u escape.
func (s *jscan) hex4() (rune, bool) {
	if len(s.b)-s.i < 4 {
		return 0, false
	}
	v, err := strconv.ParseUint(string(s.b[s.i:s.i+4]), 16, 16)
	if err != nil {
		return 0, false
	}
	s.i += 4
	return rune(v), true
}

// number reads a number token and returns its text. The grammar is RFC
// 8259's but for one leniency of protojson's reader, kept so the same files
// load: an exponent marker followed by something may have no digits ("1e"
// before a comma or brace reads as 1).
func (s *jscan) number() ([]byte, error) {
	s.ws()
	start := s.i
	digits := func() int {
		n := 0
		for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
			s.i++
			n++
		}
		return n
	}
	if s.i < len(s.b) && s.b[s.i] == '-' {
		s.i++
	}
	switch {
	case s.i < len(s.b) && s.b[s.i] == '0':
		s.i++
	case digits() == 0:
		s.i = start
		return nil, s.unexpected("a number")
	}
	if s.i+1 < len(s.b) && s.b[s.i] == '.' && s.b[s.i+1] >= '0' && s.b[s.i+1] <= '9' {
		s.i++
		digits()
	}
	if s.i+1 < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.b[s.i] == '+' || s.b[s.i] == '-' {
			if s.i++; s.i == len(s.b) {
				return nil, errEOF
			}
			// The leniency ends at a sign: protojson reads "1e" but
			// not "1e+".
			if digits() == 0 {
				return nil, s.errorf("invalid number")
			}
		}
		digits()
	}
	// A number ends at a delimiter: "1.", "1x" and "1e5.5" are not numbers.
	if s.i < len(s.b) && notDelim(s.b[s.i]) {
		return nil, s.errorf("invalid number")
	}
	return s.b[start:s.i], nil
}

func notDelim(c byte) bool {
	return c == '-' || c == '+' || c == '.' || c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// uint32 reads a uint32 field's value as protojson does: a number, or a
// string holding exactly one, whose value is an integer in range.
func (s *jscan) uint32() (uint32, error) {
	var text []byte
	if s.peek() == '"' {
		v, err := s.strBytes()
		if err != nil {
			return 0, err
		}
		in := &jscan{b: v}
		if text, err = in.number(); err != nil || in.i != len(in.b) || len(v) == 0 || isSpace(v[0]) {
			return 0, fmt.Errorf("invalid value for uint32 %q", v)
		}
	} else {
		var err error
		if text, err = s.number(); err != nil {
			return 0, fmt.Errorf("invalid value for uint32: %w", err)
		}
	}
	n, ok := integer(text)
	if !ok {
		return 0, fmt.Errorf("invalid value for uint32 %s", text)
	}
	return n, nil
}

// smallInteger is integer's fast way for most values (a port, a TTL): up
// to 9 digits alone, which never overflow.
func smallInteger(text []byte) (uint32, bool) {
	if len(text) == 0 || len(text) > 9 {
		return 0, false
	}
	n := uint32(0)
	for _, c := range text {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + uint32(c-'0')
	}
	return n, true
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// integer returns the value of a JSON number that is a uint32, however it
// is written: 30, 30.0, 3e1, 300e-1 and -0 all are, 30.5 and -1 are not.
func integer(text []byte) (uint32, bool) {
	if n, ok := smallInteger(text); ok {
		return n, true
	}
	neg := text[0] == '-'
	if neg {
		text = text[1:]
	}
	i := 0
	for i < len(text) && text[i] >= '0' && text[i] <= '9' {
		i++
	}
	intp := text[:i]
	if string(intp) == "0" {
		intp = nil // a lone leading zero adds no digit
	}
	text = text[i:]
	var frac []byte
	if len(text) > 0 && text[0] == '.' {
		j := 1
		for j < len(text) && text[j] >= '0' && text[j] <= '9' {
			j++
		}
		frac, text = text[1:j], text[j:]
		for len(frac) > 0 && frac[len(frac)-1] == '0' {
			frac = frac[:len(frac)-1]
		}
	}
	if len(intp) == 0 && len(frac) == 0 {
		return 0, true // zero, whatever its sign and exponent
	}
	exp := 0
	if len(text) >= 2 { // e or E, then the exponent (a lone "e" counts for nothing)
		if len(text) == 2 && (text[1] == '+' || text[1] == '-') {
			return 0, false
		}
		e, err := strconv.ParseInt(string(text[1:]), 10, 32)
		if err != nil {
			return 0, false
		}
		exp = int(e)
	}
	var digits []byte
	if exp >= 0 {
		// The fraction's digits move into the integer part; there must
		// be no more of them than the exponent moves.
		if len(frac) > exp || len(intp)+exp > 20 {
			return 0, false
		}
		digits = append(append(digits, intp...), frac...)
		for range exp - len(frac) {
			digits = append(digits, '0')
		}
	} else {
		// The integer part's last digits move into the fraction; they
		// must all be zeros.
		at := len(intp) + exp
		if len(frac) > 0 || at < 0 {
			return 0, false
		}
		for _, c := range intp[at:] {
			if c != '0' {
				return 0, false
			}
		}
		digits = intp[:at]
	}
	if neg {
		return 0, false
	}
	n, err := strconv.ParseUint(string(digits), 10, 32)
	if err != nil {
		return 0, false
	}
	return uint32(n), true
}
