package agent

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/meshdns/meshdns/internal/filewatch"
)

// annotationWatch follows the pod's annotations in the file a downward
// API volume keeps current (--pod-annotations; the kubelet rewrites it,
// by a symlink swap, within a minute or so of a change) and hands the
// query log's to the query log sources: a switch per pod without a
// restart.
type annotationWatch struct {
	path     string
	interval time.Duration
	a        *Agent
	// last is the content applied last, so a poll that finds the file
	// touched but equal does nothing; lastErr the last error logged.
	last, lastErr string
}

// parseDownwardAnnotations reads the downward API's annotations file:
// one key="value" per line, the value quoted as Go's strconv.Quote does.
func parseDownwardAnnotations(b []byte) (map[string]string, error) {
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), 1<<20) // annotations total at most 256 KiB
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if line == "" {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return nil, fmt.Errorf("line %d: no '='", n)
		}
		uv, err := strconv.Unquote(v)
		if err != nil {
			return nil, fmt.Errorf("line %d (%s): value not quoted: %w", n, k, err)
		}
		out[k] = uv
	}
	return out, sc.Err()
}

// load reads the file and sets the annotation source; a bad file or value
// is logged and the last good setting stays. A missing file is no
// annotations.
func (w *annotationWatch) load() error {
	b, err := os.ReadFile(w.path)
	if errors.Is(err, fs.ErrNotExist) {
		b, err = nil, nil
	}
	if err != nil {
		return fmt.Errorf("pod annotations %s: %w", w.path, err)
	}
	if string(b) == w.last && w.lastErr == "" {
		return nil
	}
	ann, err := parseDownwardAnnotations(b)
	if err != nil {
		return fmt.Errorf("pod annotations %s: %w", w.path, err)
	}
	p, err := queryLogFromAnnotations(ann)
	if err != nil {
		return fmt.Errorf("pod annotations %s: %w", w.path, err)
	}
	w.last = string(b)
	c := w.a.qlSources.update(func(s *queryLogSources) { s.annotation = p })
	w.a.log.Info("query log set from the pod's annotations", "classes", c.Classes.String(), "sample", c.Sample, "rate", c.Rate)
	return nil
}

// reload is filewatch's callback: load, logging an error once until it
// changes.
func (w *annotationWatch) reload() {
	if err := w.load(); err != nil {
		if err.Error() != w.lastErr {
			w.a.log.Error("bad query log annotation; the last good query log setting stays", "err", err)
		}
		w.lastErr = err.Error()
		w.a.m.annotationRejects.Inc()
		return
	}
	w.lastErr = ""
}

// Run follows the file's folder until ctx ends.
func (w *annotationWatch) Run(ctx context.Context) error {
	return filewatch.Run(ctx, filewatch.Config{Paths: []string{filepath.Dir(w.path)}, Interval: w.interval, Changed: w.reload, Logger: w.a.log})
}
