package webhook

import (
	"context"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
)

// watchFiles calls changed whenever one of files may have changed, until
// ctx ends. It watches the files' directories, not the files: a ConfigMap or
// Secret volume updates by swapping a symlink (..data), and editors replace
// files by rename, both of which a watch on the file itself misses. The poll
// every interval is a fallback for file systems without inotify and for
// events lost while a directory was being replaced; changed must therefore
// be cheap when nothing changed.
func watchFiles(ctx context.Context, log *slog.Logger, files []string, interval time.Duration, changed func()) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		log.Warn("file watch unavailable, polling only", "err", err)
	} else {
		defer w.Close()
		seen := map[string]bool{}
		for _, f := range files {
			d := filepath.Dir(f)
			if seen[d] {
				continue
			}
			seen[d] = true
			if err := w.Add(d); err != nil {
				log.Warn("file watch unavailable, polling only", "dir", d, "err", err)
			}
		}
	}
	var events <-chan fsnotify.Event
	var errs <-chan error
	if w != nil {
		events, errs = w.Events, w.Errors
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			changed()
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			log.Warn("file watch", "err", err)
		case <-tick.C:
			changed()
		}
	}
}
