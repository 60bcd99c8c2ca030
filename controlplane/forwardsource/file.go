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
	"k8s.io/apimachinery/pkg/labels"

	"github.com/meshdns/meshdns/controlplane/podmeta"
	"github.com/meshdns/meshdns/internal/filewatch"
)

// FileConfig configures a File.
type FileConfig struct {
	// Path is the rules file (ParseFile's form), for example a mounted
	// ConfigMap's key. Required.
	Path string
	// PodLabels lets rules with a podSelector select pods (see NewPart);
	// nil: such rules select none. Pods, when set, is used instead: the
	// control plane's shared pod label cache, run by its owner, asked for
	// the namespaces the rules with a podSelector name.
	PodLabels PodLabels
	Pods      *podmeta.Pods
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

	pods *podmeta.Need // or nil without Pods

	readyMu sync.Mutex // guards good; serialises closing ready
	good    bool       // a good version is in
	last    []byte     // the content of the last good version; only Run's goroutine
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
		log: log.With("source", "forwarding-file", "path", cfg.Path)}
	if cfg.Pods != nil {
		// A pod's labels decide which rules its agent gets.
		f.pods = cfg.Pods.Need(func(string, string, labels.Set) { f.Notify() })
	}
	return f, nil
}

// Ready is closed once the first good version of the file is in (and
// the pods' labels, with Pods).
func (f *File) Ready() <-chan struct{} { return f.ready }

// Run reads the file, then again whenever it may have changed, until ctx
// ends.
func (f *File) Run(ctx context.Context) error {
	g, ctx := errgroup.WithContext(ctx)
	if f.pods != nil {
		g.Go(func() error {
			select {
			case <-f.pods.Synced():
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

// maybeReady closes ready once a good version is in and the pods its
// rules select from are listed.
func (f *File) maybeReady() {
	f.readyMu.Lock()
	defer f.readyMu.Unlock()
	select {
	case <-f.ready:
		return
	default:
	}
	if !f.good {
		return
	}
	if f.pods != nil {
		select {
		case <-f.pods.Synced():
		default:
			return
		}
	}
	close(f.ready)
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
	if f.pods != nil {
		f.pods.Set(selectorNamespaces(rules))
	}
	f.Set(rules)
	f.readyMu.Lock()
	f.good = true
	f.readyMu.Unlock()
	f.maybeReady()
	f.log.Info("forwarding rules loaded", "rules", len(rules))
}

// selectorNamespaces returns the namespaces whose pods' labels the rules
// need: those of the rules with a podSelector (every namespace for such a
// rule without namespaces). Fill looks a pod's labels up only for those.
func selectorNamespaces(rules []Rule) []string {
	var out []string
	for _, r := range rules {
		switch {
		case r.Selector == nil:
		case len(r.Namespaces) == 0:
			return []string{podmeta.AllNamespaces}
		default:
			out = append(out, r.Namespaces...)
		}
	}
	return out
}
