// Package filesource serves entries from YAML files and folders, reloaded
// when they change (including the atomic symlink swap of a mounted
// Kubernetes ConfigMap).
package filesource

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshdns/meshdns/controlplane/internal/deps"
	"github.com/meshdns/meshdns/controlplane/registry"
	"github.com/meshdns/meshdns/controlplane/vip"
)

// Config configures a Source.
type Config struct {
	// Paths are entries files, or folders whose *.yaml, *.yml and *.json
	// files (not hidden ones, so a ConfigMap's ..data is skipped) are read.
	Paths []string
	// VIP allocates addresses to entries without any; nil leaves them
	// without addresses.
	VIP *vip.Allocator
	// Name is the source name given to the sink; zero means "file".
	Name string
	// Resync re-reads everything this often in case an event was missed
	// (network file systems send none); zero means 30s.
	Resync time.Duration
	// Settle is how long a change waits for more events before the files
	// are read (a ConfigMap swap is several events); zero means 20ms.
	Settle time.Duration
	// Logger; nil discards.
	Logger *slog.Logger
	// Registerer for the metrics; nil registers nowhere.
	Registerer prometheus.Registerer
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Source is the file source. It satisfies registry.Source.
type Source struct {
	cfg Config
	log *slog.Logger
	m   *metrics

	// Owned by the Run goroutine.
	files map[string]*fileState
	sent  [32]byte // digest of the last snapshot sent
	once  bool     // a snapshot was sent
}

var _ registry.Source = (*Source)(nil)

type fileState struct {
	digest  [32]byte // of the content last read, good or bad
	good    bool     // the file has a last good version
	goodSum [32]byte // digest of the last good version
	entries []registry.Entry
	zones   []string
}

// New returns a source; Run reads the files.
func New(cfg Config) (*Source, error) {
	if len(cfg.Paths) == 0 {
		return nil, errors.New("filesource: no paths")
	}
	if cfg.Name == "" {
		cfg.Name = "file"
	}
	if cfg.Resync <= 0 {
		cfg.Resync = 30 * time.Second
	}
	if cfg.Settle <= 0 {
		cfg.Settle = 20 * time.Millisecond
	}
	cfg.Now = deps.Now(cfg.Now)
	log := deps.Logger(cfg.Logger)
	reg := deps.Registerer(cfg.Registerer)
	m, err := newMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("filesource metrics: %w", err)
	}
	return &Source{cfg: cfg, log: log.With("source", cfg.Name), m: m, files: map[string]*fileState{}}, nil
}

// Name is the source name passed to the sink.
func (s *Source) Name() string { return s.cfg.Name }

// Run reads the files, sends a snapshot, and sends another whenever they
// change, until ctx ends. It always sends a first snapshot, even an empty
// one, so a registry waiting for this source is not held up by a bad file.
func (s *Source) Run(ctx context.Context, sink registry.Sink) error {
	// Watch before the first read, so a change right after it is seen.
	w, err := fsnotify.NewWatcher()
	if err != nil {
		s.log.Error("cannot watch entries files; relying on resync", "err", err)
	} else {
		defer w.Close()
		s.watch(w)
	}
	var events <-chan fsnotify.Event
	var errs <-chan error
	if w != nil {
		events, errs = w.Events, w.Errors
	}
	s.reload(sink)
	resync := time.NewTicker(s.cfg.Resync)
	defer resync.Stop()
	settle := time.NewTimer(time.Hour)
	settle.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			s.log.Debug("entries path event", "event", ev.String())
			settle.Reset(s.cfg.Settle)
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			s.log.Warn("entries watch error", "err", err)
		case <-settle.C:
			s.reload(sink)
		case <-resync.C:
			if w != nil {
				s.watch(w) // folders created after start
			}
			s.reload(sink)
		}
	}
}

// watch adds the folders to watch: a folder path itself, or a file's
// parent (editors and ConfigMaps replace files by rename, which a watch
// on the file itself would lose).
func (s *Source) watch(w *fsnotify.Watcher) {
	for _, p := range s.cfg.Paths {
		dir := p
		if fi, err := os.Stat(p); err != nil || !fi.IsDir() {
			dir = filepath.Dir(p)
		}
		if err := w.Add(dir); err != nil {
			s.log.Warn("cannot watch entries folder", "path", dir, "err", err)
		}
	}
}

// reload reads every file and sends a snapshot if anything changed.
func (s *Source) reload(sink registry.Sink) {
	s.m.reloads.Inc()
	paths := s.list()
	seen := make(map[string]bool, len(paths))
	for _, p := range paths {
		seen[p] = true
		s.read(p)
	}
	for p := range s.files {
		if !seen[p] {
			s.log.Info("entries file removed", "path", p)
			delete(s.files, p)
		}
	}
	h := sha256.New()
	var entries []registry.Entry
	var zones []string
	for _, p := range paths {
		st := s.files[p]
		if st == nil || !st.good {
			continue
		}
		fmt.Fprintf(h, "%s\x00%x\x00", p, st.goodSum)
		entries = append(entries, st.entries...)
		zones = append(zones, st.zones...)
	}
	var digest [32]byte
	h.Sum(digest[:0])
	if s.once && digest == s.sent {
		return
	}
	entries = s.allocate(entries)
	s.sent, s.once = digest, true
	s.m.entries.Set(float64(len(entries)))
	s.log.Info("entries loaded", "files", len(paths), "entries", len(entries))
	sink.Update(s.cfg.Name, registry.Snapshot{Entries: entries, Zones: zones, Changed: s.cfg.Now()})
}

// list expands the configured paths into files, sorted, so files later in
// the order lose conflicts the same way in every replica.
func (s *Source) list() []string {
	var out []string
	for _, p := range s.cfg.Paths {
		fi, err := os.Stat(p)
		if err != nil {
			s.m.reloadErrors.Inc()
			s.log.Error("entries path unreadable; keeping its last good entries", "path", p, "err", err)
			// Keep the files we had under it.
			for f := range s.files {
				if f == p || strings.HasPrefix(f, p+string(filepath.Separator)) {
					out = append(out, f)
				}
			}
			continue
		}
		if !fi.IsDir() {
			out = append(out, p)
			continue
		}
		des, err := os.ReadDir(p)
		if err != nil {
			s.m.reloadErrors.Inc()
			s.log.Error("entries folder unreadable", "path", p, "err", err)
			continue
		}
		for _, de := range des {
			name := de.Name()
			if strings.HasPrefix(name, ".") || !hasEntriesExt(name) {
				continue
			}
			fp := filepath.Join(p, name)
			// Follow symlinks (ConfigMap keys are links into ..data).
			if fi, err := os.Stat(fp); err != nil || fi.IsDir() {
				continue
			}
			out = append(out, fp)
		}
	}
	sort.Strings(out)
	return out
}

func hasEntriesExt(name string) bool {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".yaml", ".yml", ".json":
		return true
	}
	return false
}

// read refreshes one file's state. A file that cannot be read or parsed
// keeps its last good entries.
func (s *Source) read(p string) {
	st := s.files[p]
	if st == nil {
		st = &fileState{}
		s.files[p] = st
	}
	data, err := readFile(p)
	if err != nil {
		s.m.reloadErrors.Inc()
		s.log.Error("entries file unreadable; keeping its last good entries", "path", p, "err", err)
		return
	}
	d := sha256.Sum256(data)
	if d == st.digest && st.digest != ([32]byte{}) {
		return // unchanged (or the same bad content, already reported)
	}
	st.digest = d
	entries, zones, err := Parse(data)
	if err != nil {
		s.m.reloadErrors.Inc()
		s.log.Error("entries file rejected; keeping its last good entries", "path", p, "had_good", st.good, "err", err)
		return
	}
	st.entries, st.zones, st.good, st.goodSum = entries, zones, true, d
}

func readFile(p string) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// One byte over the limit is enough for Parse to reject the file.
	return io.ReadAll(io.LimitReader(f, maxFileSize+1))
}

// allocate gives entries without addresses their virtual IPs. The entries
// slices are the files' own, so copy before changing them.
func (s *Source) allocate(entries []registry.Entry) []registry.Entry {
	if s.cfg.VIP == nil {
		return entries
	}
	var hosts []string
	for _, e := range entries {
		if len(e.IPs) == 0 {
			hosts = append(hosts, e.Hostname)
		}
	}
	if len(hosts) == 0 {
		return entries
	}
	vips, err := s.cfg.VIP.Assign(hosts)
	if err != nil {
		s.m.vipErrors.Inc()
		s.log.Error("virtual IPs", "err", err)
	}
	out := make([]registry.Entry, len(entries))
	for i, e := range entries {
		if len(e.IPs) == 0 {
			e.IPs = vips[e.Hostname]
		}
		out[i] = e
	}
	return out
}
