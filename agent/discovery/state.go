package discovery

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/meshdns/meshdns/internal/atomicfile"
)

// stateFile is the persisted table inside StateDir: a
// StreamNameTableResponse holding version_info and the full table, in the
// binary proto form (compact, and versioned by the proto itself).
const stateFile = "nametable.pb"

// saveState writes the table atomically (internal/atomicfile), so a crash
// leaves either the old or the new table, never half of one.
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
	if err := atomicfile.WriteFile(filepath.Join(dir, stateFile), b, 0o600); err != nil {
		return fmt.Errorf("save state: %w", err)
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
