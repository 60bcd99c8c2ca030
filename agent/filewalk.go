package agent

import (
	"bufio"
	"crypto/sha256"
	"encoding/json"
	"io"
	"unsafe"
)

// skimTableNames calls each with every name of the table file r and the
// raw JSON of its NameInfo (both valid during the call only), and returns
// the hash of the whole content. It skims the file byte by byte
// (jsonSkim) instead of decoding it: a staged replacement walks both files
// once per stage, and decoding each walk cost more than the stages'
// patches. It checks only the shape it walks: a file it reads was
// compared (eachFileName, as strictly as a build) before, and each walk
// checks the hash, so it reads the content that was checked.
func skimTableNames(r io.Reader, each func(host string, raw []byte) error) ([sha256.Size]byte, error) {
	var sum [sha256.Size]byte
	h := sha256.New()
	s := &jsonSkim{r: bufio.NewReaderSize(io.TeeReader(r, h), 32<<10)}
	var key []byte
	err := s.topLevel(func(k []byte) (bool, error) {
		if string(k) != "table" {
			return false, nil
		}
		if c, err := s.next(); err != nil || c != '{' {
			return true, errJSONSyntax
		}
		for first := true; ; first = false {
			c, err := s.next()
			if err != nil {
				return true, err
			}
			if c == '}' {
				return true, nil
			}
			if !first {
				if c != ',' {
					return true, errJSONSyntax
				}
				if c, err = s.next(); err != nil {
					return true, err
				}
			}
			if c != '"' {
				return true, errJSONSyntax
			}
			s.buf = append(s.buf[:0], '"')
			if err := s.str(true); err != nil {
				return true, err
			}
			key = append(key[:0], s.buf...)
			host, err := unquoteKey(key)
			if err != nil {
				return true, err
			}
			if c, err := s.next(); err != nil || c != ':' {
				return true, errJSONSyntax
			}
			raw, err := s.value(true)
			if err != nil {
				return true, err
			}
			if err := each(host, raw); err != nil {
				return true, err
			}
		}
	})
	if err != nil {
		return sum, err
	}
	if _, err := io.Copy(io.Discard, s.r); err != nil {
		return sum, err
	}
	copy(sum[:], h.Sum(nil))
	return sum, nil
}

// unquoteKey returns the string of the quoted JSON string q: a view of q's
// bytes when it has no escape (valid while q is), else a decoded copy.
func unquoteKey(q []byte) (string, error) {
	for _, c := range q[1 : len(q)-1] {
		if c == '\\' {
			var s string
			err := json.Unmarshal(q, &s)
			return s, err
		}
	}
	return unsafe.String(unsafe.SliceData(q[1:]), len(q)-2), nil
}
