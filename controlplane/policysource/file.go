package policysource

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/meshdns/meshdns/controlplane/internal/deps"
	"github.com/meshdns/meshdns/controlplane/registry"
	"github.com/meshdns/meshdns/internal/filewatch"
)

// FileOrigin is the Store origin of the policies from files.
const FileOrigin = "file"

// FileConfig configures a File source.
type FileConfig struct {
	// Paths are DNSPolicy files (YAML or JSON, several documents each) or
	// folders of them (their *.yaml, *.yml and *.json files, dotfiles
	// skipped). Required.
	Paths []string
	// Store receives the policies. Required.
	Store *Store
	// Name is the source name given to the registry; zero means
	// "policyfiles".
	Name string
	// Interval is how often the files are polled besides file system
	// events; zero means 30s.
	Interval time.Duration
	// Logger; nil discards.
	Logger *slog.Logger
}

// File follows DNSPolicy files, for VMs and control planes without the
// Kubernetes API: the same objects and checks as the API's. A file is
// taken whole or not at all: one invalid document keeps the file's last
// good policies (logged with every error), a removed file's policies go.
//
// It is a registry.Source that sends one empty snapshot once every file
// has a good version, so no agent is served before its policy is known.
type File struct {
	cfg  FileConfig
	log  *slog.Logger
	good map[string][]Policy // the last good policies of each file; only Run's goroutine
	sent bool                // the snapshot went out
	// refused are the policies the Store's rule budget refused, as last
	// logged; only Run's goroutine.
	refused map[string]error
}

var _ registry.Source = (*File)(nil)

// NewFile returns a file source; Run reads and follows the files.
func NewFile(cfg FileConfig) (*File, error) {
	if len(cfg.Paths) == 0 || cfg.Store == nil {
		return nil, errors.New("policysource: file source needs paths and a store")
	}
	if cfg.Name == "" {
		cfg.Name = "policyfiles"
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 30 * time.Second
	}
	return &File{cfg: cfg, log: deps.Logger(cfg.Logger).With("source", cfg.Name), good: map[string][]Policy{}}, nil
}

// Name is the source name passed to the registry.
func (f *File) Name() string { return f.cfg.Name }

// Run reads the files, then again whenever they may have changed, until
// ctx ends.
func (f *File) Run(ctx context.Context, sink registry.Sink) error {
	return filewatch.Run(ctx, filewatch.Config{
		Paths: f.cfg.Paths, Interval: f.cfg.Interval, Logger: f.log,
		Changed: func() { f.reload(sink) },
	})
}

func (f *File) reload(sink registry.Sink) {
	files, complete := f.list()
	missing := false
	for _, p := range files {
		data, err := ReadFile(p)
		if err == nil {
			var ps []Policy
			if ps, err = ParseFile(data); err == nil {
				f.good[p] = ps
				continue
			}
		}
		_, had := f.good[p]
		missing = missing || !had
		f.log.Error("DNSPolicy file rejected; keeping its last good policies", "path", p, "had_good", had, "err", err)
	}
	if complete {
		for p := range f.good {
			if !slices.Contains(files, p) {
				f.log.Info("DNSPolicy file removed", "path", p)
				delete(f.good, p)
			}
		}
	}
	var all []Policy
	for _, p := range slices.Sorted(maps.Keys(f.good)) {
		all = append(all, f.good[p]...)
	}
	f.cfg.Store.SetPolicies(FileOrigin, all)
	f.logRefused()
	if !f.sent && !missing && complete {
		f.sent = true
		f.log.Info("DNSPolicy files loaded", "files", len(files), "policies", len(all))
		sink.Update(f.cfg.Name, registry.Snapshot{})
	}
}

// logRefused logs the file policies the Store's rule budget newly
// refuses (their files are good: a folder's files together are over it).
func (f *File) logRefused() {
	refused := f.cfg.Store.Refused(FileOrigin)
	for _, key := range slices.Sorted(maps.Keys(refused)) {
		if _, was := f.refused[key]; !was {
			f.log.Error("DNSPolicy not served: its namespace's policies have too many rules", "policy", key, "err", refused[key])
		}
	}
	f.refused = refused
}

// list expands the paths into files, sorted. complete is false when a
// path could not be read: its files are then neither read nor dropped.
func (f *File) list() (files []string, complete bool) {
	complete = true
	for _, p := range f.cfg.Paths {
		fi, err := os.Stat(p)
		if err != nil {
			complete = false
			f.log.Error("DNSPolicy path unreadable; keeping its last good policies", "path", p, "err", err)
			continue
		}
		if !fi.IsDir() {
			files = append(files, p)
			continue
		}
		des, err := os.ReadDir(p)
		if err != nil {
			complete = false
			f.log.Error("DNSPolicy folder unreadable; keeping its last good policies", "path", p, "err", err)
			continue
		}
		for _, de := range des {
			name := de.Name()
			switch strings.ToLower(filepath.Ext(name)) {
			case ".yaml", ".yml", ".json":
			default:
				continue
			}
			fp := filepath.Join(p, name)
			if fi, err := os.Stat(fp); strings.HasPrefix(name, ".") || err != nil || fi.IsDir() {
				continue
			}
			files = append(files, fp)
		}
	}
	slices.Sort(files)
	return slices.Compact(files), complete
}
