package forwardsource

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/meshdns/meshdns/internal/filewatch"
)

// FileConfig configures a File.
type FileConfig struct {
	// Path is the rules file (ParseFile's form), for example a mounted
	// ConfigMap's key. Required.
	Path string
	// PodLabels lets rules with a podSelector select pods (see NewPart);
	// nil: such rules select none. Pods, when set, is run with the file
	// and used instead.
	PodLabels PodLabels
	Pods      *Pods
	// Interval is how often the file is polled besides file system
	// events; zero means 30s.
	Interval time.Duration
	// Logger; nil discards.
	Logger *slog.Logger
}

// File follows a rules file and is the settings part of its rules: each
// good version replaces them; a bad one (or a file that cannot be read) is
// logged and the last good rules stay. It implements agentsettings.Part,
// and Run and Ready for the control plane to run it and hold agents'
// streams until the first good version is in: before it, a pod's stub
// domains would go to the default upstreams.
type File struct {
	*Part
	cfg   FileConfig
	log   *slog.Logger
	ready chan struct{} // closed at the first good version, pods synced

	readyMu    sync.Mutex    // guards good; serialises closing ready
	good       bool          // a good version is in
	podsSynced chan struct{} // closed once the pods synced, or at Run without Pods
	last       []byte        // the content of the last good version; only Run's goroutine
}

// NewFile returns a File; Run reads and follows it.
func NewFile(cfg FileConfig) (*File, error) {
	if cfg.Path == "" {
		return nil, errors.New("forwardsource: file needs a path")
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 30 * time.Second
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	podLabels := cfg.PodLabels
	if cfg.Pods != nil {
		podLabels = cfg.Pods.Labels
	}
	f := &File{Part: NewPart(podLabels), cfg: cfg, ready: make(chan struct{}),
		podsSynced: make(chan struct{}), log: log.With("source", "forwarding-file", "path", cfg.Path)}
	if cfg.Pods != nil {
		// A pod's labels decide which rules its agent gets.
		cfg.Pods.onChange(f.Notify)
	}
	return f, nil
}

// Ready is closed once the first good version of the file is in (and
// the pods' labels, with Pods).
func (f *File) Ready() <-chan struct{} { return f.ready }

// Run reads the file, then again whenever it may have changed, until ctx
// ends.
func (f *File) Run(ctx context.Context) error {
	if f.cfg.Pods == nil {
		close(f.podsSynced)
	}
	g, ctx := errgroup.WithContext(ctx)
	if f.cfg.Pods != nil {
		g.Go(func() error { return f.cfg.Pods.Run(ctx) })
		g.Go(func() error {
			select {
			case <-f.cfg.Pods.Synced():
				close(f.podsSynced)
				f.maybeReady()
			case <-ctx.Done():
			}
			return nil
		})
	}
	g.Go(func() error {
		return filewatch.Run(ctx, filewatch.Config{
			Paths: []string{f.cfg.Path}, Interval: f.cfg.Interval, Logger: f.log,
			Changed: f.reload,
		})
	})
	return g.Wait()
}

// maybeReady closes ready once a good version is in and the pods synced.
func (f *File) maybeReady() {
	f.readyMu.Lock()
	defer f.readyMu.Unlock()
	select {
	case <-f.ready:
		return
	default:
	}
	select {
	case <-f.podsSynced:
		if f.good {
			close(f.ready)
		}
	default:
	}
}

func (f *File) reload() {
	data, err := os.ReadFile(f.cfg.Path)
	if err != nil {
		f.log.Error("forwarding rules unreadable; keeping the last good ones", "err", err)
		return
	}
	if f.last != nil && bytes.Equal(data, f.last) {
		return
	}
	rules, err := ParseFile(data)
	if err != nil {
		f.log.Error("forwarding rules rejected; keeping the last good ones", "err", err)
		return
	}
	f.last = data
	f.Set(rules)
	f.readyMu.Lock()
	f.good = true
	f.readyMu.Unlock()
	f.maybeReady()
	f.log.Info("forwarding rules loaded", "rules", len(rules))
}
