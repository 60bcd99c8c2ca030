package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/meshdns/meshdns/internal/filewatch"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// maxTableFile bounds the static table file read into memory (a 100,000
// name table in protojson is about 20 MB).
const maxTableFile = 256 << 20

// fileSource serves a static table file and reloads it when it changes
// (internal/filewatch: events of the file's folder, and a stat poll every
// interval).
type fileSource struct {
	path     string
	interval time.Duration
	// apply converts and builds the file's content (protojson) and
	// returns how many names it holds; it counts its own rejections.
	apply func(version string, b []byte, dump func() (*meshdnsv1.NameTable, error)) (int, error)
	log   *slog.Logger

	// Owned by the Run goroutine (load is also called once before Run).
	seen    [sha256.Size]byte // content last applied or rejected
	lastErr string            // last rejection logged, so it is logged once
}

// parseTableFile reads the protojson form of a NameTable. Unknown fields
// are an error: a misspelt field name would otherwise drop data silently.
func parseTableFile(b []byte) (*meshdnsv1.NameTable, error) {
	var nt meshdnsv1.NameTable
	if err := protojson.Unmarshal(b, &nt); err != nil {
		return nil, err
	}
	return &nt, nil
}

// load reads the file and applies it when its content changed. It returns
// an error (for the caller to log) when the file cannot be read or the
// table is rejected; the table being served stays then.
func (f *fileSource) load() error {
	fi, err := os.Stat(f.path)
	if err != nil {
		return fmt.Errorf("name table file: %w", err)
	}
	if fi.Size() > maxTableFile {
		return fmt.Errorf("name table file %s: %d bytes is more than %d", f.path, fi.Size(), maxTableFile)
	}
	b, err := os.ReadFile(f.path)
	if err != nil {
		return fmt.Errorf("name table file: %w", err)
	}
	sum := sha256.Sum256(b)
	if sum == f.seen {
		return nil
	}
	f.seen = sum
	version := "file-" + hex.EncodeToString(sum[:6])
	names, err := f.apply(version, b, f.dumper(sum))
	if err != nil {
		return fmt.Errorf("name table file %s: %w", f.path, err)
	}
	f.log.Info("loaded name table file", "path", f.path, "version", version, "names", names)
	return nil
}

// dumper returns a function reading the file again for /debug/nametable,
// failing when its content is no longer the version being served.
func (f *fileSource) dumper(sum [sha256.Size]byte) func() (*meshdnsv1.NameTable, error) {
	return func() (*meshdnsv1.NameTable, error) {
		b, err := os.ReadFile(f.path)
		if err != nil {
			return nil, err
		}
		if sha256.Sum256(b) != sum {
			return nil, errors.New("the file changed since this table was loaded (the new content was rejected or is being loaded)")
		}
		return parseTableFile(b)
	}
}

// reload loads the file and logs a rejection. It runs when the file may
// have changed; unchanged content costs a read and a hash.
func (f *fileSource) reload() {
	err := f.load()
	if err == nil {
		f.lastErr = ""
		return
	}
	if err.Error() != f.lastErr {
		f.lastErr = err.Error()
		f.log.Error("rejected name table file; the last good table keeps serving", "err", err)
	}
}

// Run follows the file until ctx ends.
func (f *fileSource) Run(ctx context.Context) error {
	return filewatch.Run(ctx, filewatch.Config{Paths: []string{f.path}, Interval: f.interval, Changed: f.reload, Logger: f.log})
}
