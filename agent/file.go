package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
	"google.golang.org/protobuf/encoding/protojson"

	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// maxTableFile bounds the static table file read into memory (a 100,000
// name table in protojson is about 20 MB).
const maxTableFile = 256 << 20

// fileSource serves a static table file and reloads it when it changes.
// It watches the file's directory rather than the file: editors and
// Kubernetes ConfigMap mounts replace files by renaming a new one (or a
// symlink to a new directory) over the old, which a watch on the file
// itself would lose. A stat on every poll tick catches what the events
// miss.
type fileSource struct {
	path     string
	interval time.Duration
	apply    func(version string, nt *meshdnsv1.NameTable, dump func() (*meshdnsv1.NameTable, error)) error
	// rejected counts a file that never reached apply (unreadable, not
	// protojson); apply counts its own rejections.
	rejected func()
	log      *slog.Logger

	// Owned by the Run goroutine (load is also called once before Run).
	seen  [sha256.Size]byte // content last applied or rejected
	stamp fileStamp         // stat of the file last read
}

// fileStamp identifies a file version without reading it.
type fileStamp struct {
	ino   uint64
	size  int64
	mtime time.Time
}

func stampOf(fi os.FileInfo) fileStamp {
	s := fileStamp{size: fi.Size(), mtime: fi.ModTime()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		s.ino = st.Ino
	}
	return s
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
	f.stamp = stampOf(fi)
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
	nt, err := parseTableFile(b)
	if err != nil {
		f.rejected()
		return fmt.Errorf("name table file %s (version %s): %w", f.path, version, err)
	}
	if err := f.apply(version, nt, f.dumper(sum)); err != nil {
		return fmt.Errorf("name table file %s: %w", f.path, err)
	}
	f.log.Info("loaded name table file", "path", f.path, "version", version, "names", len(nt.GetTable()))
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

// reload loads the file and logs a rejection. Unchanged files cost a read
// and a hash.
func (f *fileSource) reload() {
	if err := f.load(); err != nil {
		f.log.Error("rejected name table file; the last good table keeps serving", "err", err)
	}
}

// changed reports whether a stat shows another file than the one last read.
func (f *fileSource) changed() bool {
	fi, err := os.Stat(f.path)
	if err != nil {
		return f.stamp != fileStamp{}
	}
	return stampOf(fi) != f.stamp
}

// Run watches the file until ctx ends.
func (f *fileSource) Run(ctx context.Context) error {
	w, err := fsnotify.NewWatcher()
	var events <-chan fsnotify.Event
	var errs <-chan error
	if err != nil {
		f.log.Warn("no file system events; polling the name table file", "err", err)
	} else {
		defer w.Close()
		if err := w.Add(filepath.Dir(f.path)); err != nil {
			f.log.Warn("cannot watch the name table directory; polling", "dir", filepath.Dir(f.path), "err", err)
		}
		events, errs = w.Events, w.Errors
	}
	tick := time.NewTicker(f.interval)
	defer tick.Stop()
	// Events come in bursts (create, write, chmod, rename); a short quiet
	// time reads the file once, after the writer is done.
	debounce := time.NewTimer(time.Hour)
	debounce.Stop()
	defer debounce.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-events:
			debounce.Reset(50 * time.Millisecond)
		case err := <-errs:
			f.log.Warn("file watch error", "err", err)
		case <-debounce.C:
			f.reload()
		case <-tick.C:
			if f.changed() {
				f.reload()
			}
		}
	}
}
