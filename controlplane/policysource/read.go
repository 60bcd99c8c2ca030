package policysource

import (
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
