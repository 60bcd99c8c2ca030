// Package filewatch calls a function when files or folders may have
// changed: on file system events (fsnotify) of the folders that hold them,
// and on a poll that compares what stat reports. It is the one way meshdns
// follows a file that is replaced while it runs: an agent's static table,
// the control plane's entries files and its injection template.
//
// The folders are watched, not the files: a ConfigMap or Secret volume
// updates by swapping a symlink (..data), and editors replace files by
// rename, both of which a watch on the file itself loses. The poll catches
// what the events miss (file systems without inotify, network file systems,
// events lost while a folder was replaced, folders created after start).
package filewatch

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Config configures Run. The zero value of each field is documented.
type Config struct {
	// Paths are the files or folders to follow; a folder's direct
	// entries are followed too. At least one is required.
	Paths []string
	// Interval is how often the paths are polled with stat; zero means
	// 10s.
	Interval time.Duration
	// Settle is how long a burst of events (a ConfigMap swap is several)
	// must be quiet before Changed is called; zero means 50ms.
	Settle time.Duration
	// Changed is called, from Run's goroutine only: once when the watches
	// are in place, then after events have settled and when a poll sees
	// another stamp than the last one. It may be called when nothing
	// changed, so it must compare content itself (a digest) before acting.
	// Required.
	Changed func()
	// Logger; nil discards.
	Logger *slog.Logger
}

// Run follows the paths until ctx ends. It calls Changed once as soon as
// its watches are in place, so that a change between a caller's first read
// (done before Run, to fail at start-up on a bad file) and the watches is
// not lost. Without fsnotify (no inotify instances left) it polls only.
func Run(ctx context.Context, cfg Config) error {
	if len(cfg.Paths) == 0 {
		return errors.New("filewatch: no paths")
	}
	if cfg.Changed == nil {
		return errors.New("filewatch: no Changed function")
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 10 * time.Second
	}
	if cfg.Settle <= 0 {
		cfg.Settle = 50 * time.Millisecond
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var events <-chan fsnotify.Event
	var errs <-chan error
	w, err := fsnotify.NewWatcher()
	if err != nil {
		log.Warn("no file system events; polling only", "err", err)
	} else {
		defer w.Close()
		events, errs = w.Events, w.Errors
	}
	addWatches(w, cfg.Paths, log, true)
	last := Stamp(cfg.Paths...)
	cfg.Changed()
	tick := time.NewTicker(cfg.Interval)
	defer tick.Stop()
	settle := time.NewTimer(time.Hour)
	settle.Stop()
	defer settle.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			log.Debug("file event", "event", ev.String())
			settle.Reset(cfg.Settle)
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			log.Warn("file watch", "err", err)
		case <-settle.C:
			last = Stamp(cfg.Paths...)
			cfg.Changed()
		case <-tick.C:
			now := Stamp(cfg.Paths...)
			if now == last {
				continue
			}
			last = now
			// A folder that did not exist at start may exist now.
			addWatches(w, cfg.Paths, log, false)
			cfg.Changed()
		}
	}
}

// addWatches watches the folder of each path: the path itself when it is
// a folder, else its parent. Failures are logged once at start (loud) and
// at debug level on later retries.
func addWatches(w *fsnotify.Watcher, paths []string, log *slog.Logger, first bool) {
	if w == nil {
		return
	}
	seen := map[string]bool{}
	for _, p := range paths {
		dir := p
		if fi, err := os.Stat(p); err != nil || !fi.IsDir() {
			dir = filepath.Dir(p)
		}
		if seen[dir] {
			continue
		}
		seen[dir] = true
		if err := w.Add(dir); err != nil {
			if first {
				log.Warn("cannot watch folder; polling it", "dir", dir, "err", err)
			} else {
				log.Debug("cannot watch folder; polling it", "dir", dir, "err", err)
			}
		}
	}
}
