package agent

import (
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/meshdns/meshdns/agent/ingest"
	"github.com/meshdns/meshdns/internal/filewatch"
)

// maxTableFile bounds the static table file (a 100,000-name table in
// protojson is about 6 to 20 MB): a wrong path must not make the agent
// read a disk image.
const maxTableFile = 256 << 20

// fileSource serves a static table file and reloads it when it changes
// (internal/filewatch: events of the file's folder, and a stat poll every
// interval). Each new content is a version (ingest.FileVersion).
type fileSource struct {
	path     string
	interval time.Duration
	// apply applies a version of the file; it counts its own rejections.
	apply func(v ingest.Version) error
	log   *slog.Logger

	// Owned by the Run goroutine (load is also called once before Run).
	seen    [sha256.Size]byte // content last applied or rejected
	lastErr string            // last rejection logged, so it is logged once
	// applied is the file last applied, kept open so its content stays
	// readable after a rename replaced it (the next comparison walks it),
	// and appliedV its version; or nil.
	applied  *os.File
	appliedV *ingest.FileVersion
}

// load reads the file and applies it when its content changed. It returns
// an error (for the caller to log) when the file cannot be read or the
// table is rejected; the table being served stays then.
func (f *fileSource) load() error {
	file, err := os.Open(f.path)
	if err != nil {
		return fmt.Errorf("name table file: %w", err)
	}
	keep := false
	defer func() {
		if !keep {
			file.Close()
		}
	}()
	fi, err := file.Stat()
	if err != nil {
		return fmt.Errorf("name table file: %w", err)
	}
	if fi.Size() > maxTableFile {
		return fmt.Errorf("name table file %s: %d bytes is more than %d", f.path, fi.Size(), maxTableFile)
	}
	v, convErr, err := ingest.ReadFileVersion(file, fi.Size(), "")
	if err != nil {
		return fmt.Errorf("name table file: %w", err)
	}
	if v.Sum() == f.seen {
		v.Close()
		return nil
	}
	f.seen = v.Sum()
	if convErr != nil {
		// Walked as JSON instead: slower, the same table.
		f.log.Debug("name table file not converted ahead", "path", f.path, "err", convErr)
	}
	if err := f.apply(v); err != nil {
		v.Close()
		return fmt.Errorf("name table file %s: %w", f.path, err)
	}
	f.close()
	keep = true
	f.applied, f.appliedV = file, v
	f.log.Info("loaded name table file", "path", f.path, "version", v.ID())
	return nil
}

// reload loads the file and logs a rejection. It runs when the file may
// have changed; unchanged content costs a read, a hash and the skim of
// the conversion readied meanwhile (ingest.ReadFileVersion).
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
	defer f.close()
	return filewatch.Run(ctx, filewatch.Config{Paths: []string{f.path}, Interval: f.interval, Changed: f.reload, Logger: f.log})
}

// close releases the file last applied and its version.
func (f *fileSource) close() {
	if f.applied != nil {
		f.applied.Close()
		f.appliedV.Close()
		f.applied, f.appliedV = nil, nil
	}
}
