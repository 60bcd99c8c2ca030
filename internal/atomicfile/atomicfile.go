// Package atomicfile replaces a file so that a reader, or the writer after
// a crash, sees the old content or the new one whole, never half of it.
package atomicfile

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// WriteFile replaces path with data, with permissions perm; see Write.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	return Write(path, perm, func(w io.Writer) error {
		_, err := io.Copy(w, bytes.NewReader(data))
		return err
	})
}

// Write replaces path with what write writes: into a temporary file in the
// same directory (a rename only replaces atomically within one file
// system), fsynced before the rename so the new name never points at
// unwritten blocks, then the directory fsynced so the rename itself
// survives a crash. On error the temporary file is removed and path is left
// as it was. The directory must exist.
func Write(path string, perm os.FileMode, write func(io.Writer) error) error {
	p, err := Prepare(path, perm, write)
	if err != nil {
		return err
	}
	return p.Commit()
}

// Pending is a new content of a file, written and fsynced beside it but
// not yet in its place: a reader of the file still sees the old content.
type Pending struct {
	path, tmp string
}

// Prepare writes what write writes into a temporary file beside path, as
// Write does, and leaves it there: Commit puts it in place, Abort removes
// it. On error nothing is left behind.
func Prepare(path string, perm os.FileMode, write func(io.Writer) error) (*Pending, error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	// The dot keeps the temporary file out of globs and directory
	// watchers that skip hidden files.
	f, err := os.CreateTemp(dir, "."+base+".tmp*")
	if err != nil {
		return nil, fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	err = write(f)
	if err == nil {
		err = f.Chmod(perm)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return nil, fmt.Errorf("write %s: %w", path, err)
	}
	return &Pending{path: path, tmp: tmp}, nil
}

// Name is the temporary file's path, readable until Commit or Abort.
func (p *Pending) Name() string { return p.tmp }

// Commit renames the temporary file over path and makes the rename
// durable. On a failed rename the temporary file is removed.
func (p *Pending) Commit() error {
	if err := os.Rename(p.tmp, p.path); err != nil {
		os.Remove(p.tmp)
		return fmt.Errorf("write %s: %w", p.path, err)
	}
	dir := filepath.Dir(p.path)
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("write %s: %w", p.path, err)
	}
	return nil
}

// Abort removes the temporary file; path keeps its content.
func (p *Pending) Abort() { os.Remove(p.tmp) }

// syncDir makes the directory's entries, a rename among them, durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync dir: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync dir: %w", err)
	}
	return nil
}
