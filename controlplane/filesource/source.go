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
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshdns/meshdns/controlplane/internal/deps"
	"github.com/meshdns/meshdns/controlplane/registry"
	"github.com/meshdns/meshdns/controlplane/vip"
	"github.com/meshdns/meshdns/internal/filewatch"
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
	// Resync is how often the paths are polled with stat in case an event
	// was missed (network file systems send none); zero means 30s.
	Resync time.Duration
	// Settle is how long a change waits for more events before the files
	// are read (a ConfigMap swap is several events); zero means 20ms.
	Settle time.Duration
	// StateDir, when set, keeps the last good version of every file
	// across restarts (in filesource-<Name>.json, written atomically), so
	// a restart while a file is invalid, empty or gone serves its last
	// good version; "" keeps nothing.
	StateDir string
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
	files  map[string]*fileState
	loaded map[string]bool // configured paths read at least once (or restored)
	sent   [32]byte        // digest of the last snapshot sent
	once   bool            // a snapshot was sent
}

var _ registry.Source = (*Source)(nil)

type fileState struct {
	digest   [32]byte // of the content last read, good or bad
	rejected bool     // the content last read was unreadable or invalid
	good     bool     // the file has a last good version
	goodSum  [32]byte // digest of the last good version
	goodData []byte   // the last good version, for the state
	entries  []registry.Entry
	zones    []string
}

func sum(data []byte) [32]byte { return sha256.Sum256(data) }

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
	return &Source{cfg: cfg, log: log.With("source", cfg.Name), m: m, files: map[string]*fileState{},
		loaded: map[string]bool{}}, nil
}

// Name is the source name passed to the sink.
func (s *Source) Name() string { return s.cfg.Name }

// Run reads the files and sends a snapshot once every configured path has
// loaded: each file has a good version (read now, or restored from
// StateDir) and each folder was listed. Until then it sends nothing, so the
// registry, waiting for this source, publishes no table that lacks a
// file's names. It then sends another snapshot whenever the files change,
// until ctx ends. Changes are noticed by internal/filewatch: events of the
// folders, and a stat poll every Resync for file systems without events.
func (s *Source) Run(ctx context.Context, sink registry.Sink) error {
	if s.cfg.StateDir != "" {
		st, err := s.loadState()
		if err != nil {
			// A damaged state is no worse than none: the files decide.
			s.log.Error("cannot restore entries files from state", "err", err)
		} else if st != nil {
			s.restore(st)
		}
	}
	// filewatch calls reload first once its watches are in place, so no
	// change is lost between the first read and the watches.
	return filewatch.Run(ctx, filewatch.Config{
		Paths:    s.cfg.Paths,
		Interval: s.cfg.Resync,
		Settle:   s.cfg.Settle,
		Changed:  func() { s.reload(sink) },
		Logger:   s.log,
	})
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
	var rejected int
	for _, p := range paths {
		if st := s.files[p]; st != nil && st.rejected {
			rejected++
		}
	}
	s.m.rejected.Set(float64(rejected))
	if !s.once {
		if waiting := s.waiting(paths); len(waiting) > 0 {
			s.log.Error("entries not loaded yet; serving no table until every path has a good version",
				"waiting", waiting)
			return
		}
		s.m.loaded.Set(1)
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
	if s.cfg.StateDir != "" {
		// Before the update: what agents may get is on disk first.
		if err := s.saveState(s.snapshotState()); err != nil {
			s.m.stateErrors.Inc()
			s.log.Error("cannot save entries state; a restart would not know this version", "err", err)
		}
	}
	sink.Update(s.cfg.Name, registry.Snapshot{Entries: entries, Zones: zones, Changed: s.cfg.Now()})
}

// waiting returns the configured paths that have not loaded and the
// listed files without a good version.
func (s *Source) waiting(paths []string) []string {
	var out []string
	for _, p := range s.cfg.Paths {
		if !s.loaded[p] {
			out = append(out, p)
		}
	}
	for _, p := range paths {
		if st := s.files[p]; st == nil || !st.good {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return slices.Compact(out)
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
		files, err := folderFiles(p)
		if err != nil {
			s.m.reloadErrors.Inc()
			s.log.Error("entries folder unreadable", "path", p, "err", err)
			continue
		}
		s.loaded[p] = true
		out = append(out, files...)
	}
	sort.Strings(out)
	return out
}

// Files returns the entries files path names, sorted: the file itself, or
// the files of a folder that Run reads. `meshdns validate` checks the same
// files the control plane would load.
func Files(path string) ([]string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return []string{path}, nil
	}
	files, err := folderFiles(path)
	sort.Strings(files)
	return files, err
}

// folderFiles lists a folder's *.yaml, *.yml and *.json files, not hidden
// ones (a ConfigMap's ..data is skipped), following symlinks (ConfigMap
// keys are links into ..data).
func folderFiles(dir string) ([]string, error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, de := range des {
		name := de.Name()
		if strings.HasPrefix(name, ".") || !hasEntriesExt(name) {
			continue
		}
		fp := filepath.Join(dir, name)
		if fi, err := os.Stat(fp); err != nil || fi.IsDir() {
			continue
		}
		out = append(out, fp)
	}
	return out, nil
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
		st.rejected = true
		st.digest = [32]byte{} // read it again once it is back
		s.m.reloadErrors.Inc()
		s.log.Error("entries file unreadable; keeping its last good entries", "path", p, "had_good", st.good, "err", err)
		return
	}
	d := sum(data)
	if d == st.digest && st.digest != ([32]byte{}) {
		return // unchanged (or the same bad content, already reported)
	}
	st.digest = d
	entries, zones, err := Parse(data)
	if err != nil {
		st.rejected = true
		s.m.reloadErrors.Inc()
		s.log.Error("entries file rejected; keeping its last good entries", "path", p, "had_good", st.good, "err", err)
		return
	}
	st.entries, st.zones, st.good, st.goodSum, st.goodData, st.rejected = entries, zones, true, d, data, false
	if slices.Contains(s.cfg.Paths, p) {
		s.loaded[p] = true // a configured file (not a folder's)
	}
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
