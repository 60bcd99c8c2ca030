package policysource

import (
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/meshdns/meshdns/pkg/policy"
)

// MaxFileSize is the most bytes a policy file may hold: one policy at the
// CRD's limits (10,000 rules of 254-character patterns) written out as
// YAML, with room per rule for its action, indentation and a comment. A
// larger file is refused before it is read, so an oversized file costs
// the control plane no memory; several policies that do not fit one file
// go in several files of a folder.
const MaxFileSize = policy.MaxRules * (policy.MaxPatternLength + 128)

// ReadFile reads a policy file, refusing one larger than MaxFileSize
// without reading it.
func ReadFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if err := checkFileSize(fi.Size()); err != nil {
		return nil, &fs.PathError{Op: "read", Path: path, Err: err}
	}
	// The file may grow between Stat and the read: never read more.
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err == nil {
		err = checkFileSize(int64(len(data)))
	}
	if err != nil {
		return nil, &fs.PathError{Op: "read", Path: path, Err: err}
	}
	return data, nil
}

func checkFileSize(n int64) error {
	if n > MaxFileSize {
		return fmt.Errorf("policy file of %d bytes, more than the limit of %d bytes (split it into several files)", n, MaxFileSize)
	}
	return nil
}

// countRules refuses a YAML document with more than policy.MaxRules rules
// before it is decoded: the YAML decoder converts a document into a tree
// of maps first, about 2 KB a rule, so a file within MaxFileSize of short
// rules in flow style (90,000 of them) would cost the control plane 190
// MiB before the rules could be counted. It counts each document's
// "pattern" keys (documents separated by "---" lines; lines that are
// comments skipped), an upper bound of its valid rules. JSON (data that
// starts with "{") is decoded into typed values, cheap enough to count
// after.
func countRules(data []byte) error {
	if t := bytes.TrimLeft(data, " \t\r\n"); len(t) > 0 && t[0] == '{' {
		return nil
	}
	doc, n := 0, 0
	start := true // no line yet: a "---" here opens document 0, as the decoder numbers them
	check := func() error {
		if err := policy.CheckRules(n); err != nil {
			return fmt.Errorf("document %d: DNSPolicy: spec.rules (counted before decoding): %w", doc, err)
		}
		return nil
	}
	for len(data) > 0 {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		t := bytes.TrimLeft(line, " \t")
		switch {
		case bytes.HasPrefix(t, []byte("#")):
		case bytes.HasPrefix(line, []byte("---")):
			if err := check(); err != nil {
				return err
			}
			if !start {
				doc++
			}
			n = 0
		default:
			n += patternKeys(t)
		}
		start = false
	}
	return check()
}

// patternKeys counts the "pattern" keys of one line of YAML: the word,
// not inside another, quoted or not, followed by a colon.
func patternKeys(line []byte) int {
	const key = "pattern"
	n := 0
	for i := 0; ; {
		j := bytes.Index(line[i:], []byte(key))
		if j < 0 {
			return n
		}
		start, end := i+j, i+j+len(key)
		i = end
		if start > 0 && !bytes.ContainsRune([]byte(" \t{,\"'-"), rune(line[start-1])) {
			continue
		}
		rest := line[end:]
		if len(rest) > 0 && (rest[0] == '"' || rest[0] == '\'') {
			rest = rest[1:]
		}
		if rest = bytes.TrimLeft(rest, " \t"); len(rest) > 0 && rest[0] == ':' {
			n++
		}
	}
}
