package agent

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"time"

	"github.com/meshdns/meshdns/internal/filewatch"
	"github.com/meshdns/meshdns/internal/namewire"
	"github.com/meshdns/meshdns/pkg/nametable"
)

// maxTableFile bounds the static table file (a 100,000-name table in
// protojson is about 6 to 20 MB): a wrong path must not make the agent
// read a disk image.
const maxTableFile = 256 << 20

// fileSource serves a static table file and reloads it when it changes
// (internal/filewatch: events of the file's folder, and a stat poll every
// interval).
type fileSource struct {
	path     string
	interval time.Duration
	// apply builds the table with produce (which reads the file) and
	// swaps it in, returning how many names it holds; it counts its own
	// rejections.
	// patch, when the table served is this file's, returns what the new
	// content changes instead (see filediff.go); ok false builds whole.
	apply func(version string, produce func(Limits, nametable.Context) (*nametable.Table, int, error), patch filePatch, dump func() (*namewire.NameTable, error)) (int, error)
	log   *slog.Logger

	// Owned by the Run goroutine (load is also called once before Run).
	seen    [sha256.Size]byte // content last applied or rejected
	lastErr string            // last rejection logged, so it is logged once
	// applied is the file last applied, kept open so its content stays
	// readable after a rename replaced it, with its hash and zones; or
	// nil.
	applied      *os.File
	appliedSum   [sha256.Size]byte
	appliedZones []string
}

// filePatch returns what a new file changes (filediff.go); ok is false
// when it is better built whole. names is the number of names of the
// table served, to size what the comparison holds.
type filePatch func(lim Limits, names int) (d fileDiff, ok bool, err error)

// parseTableFile reads the JSON form of a NameTable whole (the debug
// dump; builds walk the file name by name). Unknown fields are an error: a
// misspelt field name would otherwise drop data silently.
func parseTableFile(b []byte) (*namewire.NameTable, error) {
	nt := &namewire.NameTable{Table: map[string]*namewire.NameInfo{}}
	err := walkTableFile(bufio.NewReader(bytes.NewReader(b)), func(host string, raw []byte) error {
		if _, ok := nt.Table[host]; ok {
			return fmt.Errorf("table: duplicate key %q", host)
		}
		info := new(namewire.NameInfo)
		if err := info.DecodeJSON(raw); err != nil {
			return fmt.Errorf("table[%q]: %w", host, err)
		}
		nt.Table[host] = info
		return nil
	}, func(zones []string) error {
		nt.AuthoritativeZones = slices.Clone(zones)
		return nil
	}, func() {})
	if err != nil {
		return nil, err
	}
	return nt, nil
}

// load reads the file and applies it when its content changed. It returns
// an error (for the caller to log) when the file cannot be read or the
// table is rejected; the table being served stays then.
//
// The file is read twice through one descriptor (so a rename in between
// cannot mix two files), never held whole: once to hash it and find its
// zones, and, when it changed, once more into the table's builder.
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
	head, scanErr := scanTableFile(io.LimitReader(file, maxTableFile))
	if scanErr != nil {
		// The scan stopped at the error: hash the whole content, so an
		// unchanged bad file is rejected (and counted) once.
		if _, err := file.Seek(0, io.SeekStart); err != nil {
			return fmt.Errorf("name table file: %w", err)
		}
		h := sha256.New()
		if _, err := io.Copy(h, io.LimitReader(file, maxTableFile)); err != nil {
			return fmt.Errorf("name table file: %w", err)
		}
		head.sum = [sha256.Size]byte(h.Sum(nil))
	}
	if head.sum == f.seen {
		return nil
	}
	f.seen = head.sum
	version := "file-" + hex.EncodeToString(head.sum[:6])
	produce := func(lim Limits, pod nametable.Context) (*nametable.Table, int, error) {
		if scanErr != nil {
			return nil, 0, scanErr
		}
		if _, err := file.Seek(0, io.SeekStart); err != nil {
			return nil, 0, err
		}
		return buildTableFileFrom(bufio.NewReaderSize(io.LimitReader(file, maxTableFile), 32<<10), head, lim, pod)
	}
	var patch filePatch
	if old := f.applied; old != nil && scanErr == nil && slices.Equal(head.zones, f.appliedZones) {
		oldSum := f.appliedSum
		patch = func(lim Limits, names int) (fileDiff, bool, error) {
			return fileChange(old, file, oldSum, head.sum, names, lim)
		}
	}
	names, err := f.apply(version, produce, patch, f.dumper(head.sum))
	if err != nil {
		return fmt.Errorf("name table file %s: %w", f.path, err)
	}
	if f.applied != nil {
		f.applied.Close()
	}
	keep = true
	f.applied, f.appliedSum, f.appliedZones = file, head.sum, head.zones
	f.log.Info("loaded name table file", "path", f.path, "version", version, "names", names)
	return nil
}

// dumper returns a function reading the file again for /debug/nametable,
// failing when its content is no longer the version being served.
func (f *fileSource) dumper(sum [sha256.Size]byte) func() (*namewire.NameTable, error) {
	return func() (*namewire.NameTable, error) {
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
	defer func() {
		if f.applied != nil {
			f.applied.Close()
		}
	}()
	return filewatch.Run(ctx, filewatch.Config{Paths: []string{f.path}, Interval: f.interval, Changed: f.reload, Logger: f.log})
}
