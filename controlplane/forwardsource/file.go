package forwardsource

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"time"

	"github.com/meshdns/meshdns/internal/filewatch"
)

// FileConfig configures a File.
type FileConfig struct {
	// Path is the rules file (ParseFile's form), for example a mounted
	// ConfigMap's key. Required.
	Path string
	// PodLabels lets rules with a podSelector select pods (see NewPart);
	// nil: such rules select none.
	PodLabels PodLabels
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
	ready chan struct{} // closed at the first good version
	last  []byte        // the content of the last good version; only Run's goroutine
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
	return &File{Part: NewPart(cfg.PodLabels), cfg: cfg, ready: make(chan struct{}),
		log: log.With("source", "forwarding-file", "path", cfg.Path)}, nil
}

// Ready is closed once the first good version of the file is in.
func (f *File) Ready() <-chan struct{} { return f.ready }

// Run reads the file, then again whenever it may have changed, until ctx
// ends.
func (f *File) Run(ctx context.Context) error {
	return filewatch.Run(ctx, filewatch.Config{
		Paths: []string{f.cfg.Path}, Interval: f.cfg.Interval, Logger: f.log,
		Changed: f.reload,
	})
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
	select {
	case <-f.ready:
	default:
		close(f.ready)
	}
	f.log.Info("forwarding rules loaded", "rules", len(rules))
}
