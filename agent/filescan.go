package agent

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// fileHead is what the first pass over a table file finds: the hash of its
// content (is it new?) and its zones, which the build needs before the
// first name while protojson writes them after the table.
type fileHead struct {
	sum   [sha256.Size]byte
	zones []string // as written; nil when absent
}

// scanTableFile reads a table file once, hashing it and picking the zones
// out of the top-level object while skipping everything else byte by byte:
// nothing of the file is kept but the zones. It checks only what it needs;
// the build reads the file again in full (readTableFile), rejects what
// protojson would, and checks the zones it finds against these.
func scanTableFile(r io.Reader) (fileHead, error) {
	var head fileHead
	h := sha256.New()
	s := &jsonSkim{r: bufio.NewReaderSize(io.TeeReader(r, h), 32<<10)}
	err := s.topLevel(func(key []byte) (bool, error) {
		if string(key) != "authoritative_zones" && string(key) != "authoritativeZones" {
			return false, nil
		}
		raw, err := s.value(true)
		if err != nil {
			return true, err
		}
		var zones []string
		if err := json.Unmarshal(raw, &zones); err != nil {
			return true, fmt.Errorf("%s: %w", key, err)
		}
		head.zones = zones
		return true, nil
	})
	if err != nil {
		return head, err
	}
	// Hash what follows the object too: trailing data is part of the
	// content (and an error of the build).
	if _, err := io.Copy(io.Discard, s.r); err != nil {
		return head, err
	}
	copy(head.sum[:], h.Sum(nil))
	return head, nil
}

// jsonSkim walks JSON from a stream without decoding it.
type jsonSkim struct {
	r   *bufio.Reader
	buf []byte // the value being kept, by value(true)
}

var errJSONSyntax = errors.New("not a JSON object")

func (s *jsonSkim) next() (byte, error) {
	for {
		c, err := s.r.ReadByte()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return 0, io.ErrUnexpectedEOF
			}
			return 0, err
		}
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		}
		return c, nil
	}
}

// topLevel walks the members of the top-level object, calling member with
// each key (unquoted); member reads the value itself and returns true, or
// returns false to have it skipped.
func (s *jsonSkim) topLevel(member func(key []byte) (bool, error)) error {
	if c, err := s.next(); err != nil || c != '{' {
		return errJSONSyntax
	}
	return s.members(func(raw []byte) (bool, error) {
		var key string
		if err := json.Unmarshal(raw, &key); err != nil {
			return false, err
		}
		return member([]byte(key))
	})
}

// members walks the members of an object whose "{" was read, up to and
// including its "}", calling member with each key as written (quoted,
// valid until member reads the value); member reads the value itself and
// returns true, or returns false to have it skipped.
func (s *jsonSkim) members(member func(rawKey []byte) (bool, error)) error {
	for first := true; ; first = false {
		c, err := s.next()
		if err != nil {
			return err
		}
		if c == '}' && first {
			return nil
		}
		if !first {
			if c == '}' {
				return nil
			}
			if c != ',' {
				return errJSONSyntax
			}
			if c, err = s.next(); err != nil {
				return err
			}
		}
		if c != '"' {
			return errJSONSyntax
		}
		s.buf = append(s.buf[:0], '"')
		if err := s.str(true); err != nil {
			return err
		}
		key := s.buf
		if c, err := s.next(); err != nil || c != ':' {
			return errJSONSyntax
		}
		took, err := member(key)
		if err != nil {
			return err
		}
		if !took {
			if _, err := s.value(false); err != nil {
				return err
			}
		}
	}
}

// str reads the rest of a string whose opening quote was read, appending
// it to s.buf when keep.
func (s *jsonSkim) str(keep bool) error {
	for esc := false; ; {
		c, err := s.r.ReadByte()
		if err != nil {
			return io.ErrUnexpectedEOF
		}
		if keep {
			s.buf = append(s.buf, c)
		}
		switch {
		case esc:
			esc = false
		case c == '\\':
			esc = true
		case c == '"':
			return nil
		}
	}
}

// value reads one value; kept, it is returned (valid until the next
// call), else skipped.
func (s *jsonSkim) value(keep bool) ([]byte, error) {
	s.buf = s.buf[:0]
	c, err := s.next()
	if err != nil {
		return nil, err
	}
	depth := 0
	for {
		if keep {
			s.buf = append(s.buf, c)
		}
		switch c {
		case '"':
			if err := s.str(keep); err != nil {
				return nil, err
			}
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth < 0 {
				return nil, errJSONSyntax
			}
		}
		if depth == 0 {
			if bytes.IndexByte([]byte(`"}]`), c) >= 0 {
				return s.buf, nil
			}
			// A number or a literal ends where a delimiter starts.
			p, err := s.r.Peek(1)
			if err != nil || bytes.IndexByte([]byte(",}] \t\r\n"), p[0]) >= 0 {
				return s.buf, nil
			}
		}
		if c, err = s.r.ReadByte(); err != nil {
			return nil, io.ErrUnexpectedEOF
		}
	}
}
