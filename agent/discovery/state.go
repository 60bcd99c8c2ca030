package discovery

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"google.golang.org/protobuf/encoding/protowire"
)

// stateFile is the persisted table inside StateDir: a
// StreamNameTableResponse holding version_info and the full table, in the
// binary proto form (compact, and versioned by the proto itself).
const stateFile = "nametable.pb"

// saveState writes the table atomically: a temporary file in the same
// directory, fsynced, then renamed over the old one, so a crash leaves
// either the old or the new table, never half of one.
//
// table is the NameTable in its wire form; the file is written as the
// StreamNameTableResponse that carries it (fields version_info and full),
// without decoding the table again.
func saveState(dir, version string, table []byte) error {
	b := protowire.AppendTag(nil, 1, protowire.BytesType)
	b = protowire.AppendString(b, version)
	b = protowire.AppendTag(b, 3, protowire.BytesType)
	b = protowire.AppendBytes(b, table)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create state dir: %w", err)
	}
	f, err := os.CreateTemp(dir, stateFile+".tmp*")
	if err != nil {
		return fmt.Errorf("create state file: %w", err)
	}
	tmp := f.Name()
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, stateFile))
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write state file: %w", err)
	}
	// The rename is durable only once the directory is synced.
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// loadState reads the persisted table, in its wire form; a missing file is
// no error and returns a nil table.
func loadState(dir string) (string, []byte, error) {
	path := filepath.Join(dir, stateFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil, nil
	}
	if err != nil {
		return "", nil, fmt.Errorf("read state: %w", err)
	}
	version, table, err := stateTable(b)
	if errors.Is(err, errNoTable) {
		return "", nil, fmt.Errorf("state file %s holds no table", path)
	}
	if err != nil {
		return "", nil, fmt.Errorf("parse state file %s: %w", path, err)
	}
	if table == nil {
		table = []byte{} // an empty table, not none
	}
	return version, table, nil
}
