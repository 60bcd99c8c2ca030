package kubetest

import (
	"flag"
	"fmt"
	"os"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

// Shared is one cluster for a whole test package, started by the first
// test that asks for it, so packages whose tests never need it (or run with
// -run filters) pay nothing. Stop it from TestMain after m.Run.
type Shared struct {
	opts []Option

	mu      sync.Mutex // guards following
	c       *Cluster   // or nil before the first Get
	err     error      // start error, reported to every later Get
	stopped bool
}

// NewShared returns a Shared that starts its cluster with opts.
func NewShared(opts ...Option) *Shared { return &Shared{opts: opts} }

// Get returns the running cluster, starting it on first use. Like Start it
// skips or fails t when the binaries are missing; a failed start fails
// every test that asks.
func (s *Shared) Get(t testing.TB) *Cluster {
	t.Helper()
	assets := testenv.KubeAssets(t)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		t.Fatal("kubetest: shared cluster already stopped")
	}
	if s.c == nil && s.err == nil {
		s.c, s.err = StartAssets(assets, s.opts...)
	}
	if s.err != nil {
		t.Fatalf("kubetest: %v", s.err)
	}
	return s.c
}

// Stop stops the cluster if one was started.
func (s *Shared) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopped = true
	s.c.Stop()
}

// Main runs a test package that uses s: m's tests, then Stop, then a check
// that no goroutine outlived its test (every informer, watch and Run loop
// must end with its test), and exits with the result. client-go's shared
// transports' idle connections and klog's flush daemon are process-wide,
// not a test's; fuzz workers are this binary too, and their goroutines are
// the fuzzer's.
func (s *Shared) Main(m *testing.M) {
	code := m.Run()
	s.Stop()
	if f := flag.Lookup("test.fuzzworker"); code == 0 && (f == nil || f.Value.String() != "true") {
		if err := goleak.Find(
			goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
			goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
			goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
