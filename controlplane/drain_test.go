package controlplane_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/meshdns/meshdns/controlplane"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

// TestDrain: when the control plane's context ends (SIGTERM), it reports
// not ready at once but keeps serving, the webhook included, until
// Drained says it is out of the endpoints; then it stops. (The webhook is
// one more server of the same group; it is shut down at the same moment.)
func TestDrain(t *testing.T) {
	gl, al, pl := listen(t), listen(t), listen(t)
	out := make(chan struct{})
	drainAsked := make(chan struct{})
	cp, err := controlplane.New(controlplane.Config{
		Entries: []string{t.TempDir()}, GRPCListener: gl, AdminListener: al, ProbeListener: pl,
		DrainTimeout: time.Minute,
		Drained: func(ctx context.Context) error {
			close(drainAsked)
			select {
			case <-out:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		},
		Debounce: 10 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	done := make(chan error, 1)
	wg.Add(1)
	go func() { defer wg.Done(); done <- cp.Run(ctx) }()
	t.Cleanup(func() { cancel(); wg.Wait() })
	probe := "http://" + pl.Addr().String() + "/healthz/ready"
	status := func() int {
		res, err := http.Get(probe)
		if err != nil {
			return 0
		}
		res.Body.Close()
		return res.StatusCode
	}
	testenv.Eventually(t, "ready", 10*time.Second, func() bool { return status() == http.StatusOK })

	cancel() // SIGTERM
	<-drainAsked
	if got := status(); got != http.StatusServiceUnavailable {
		t.Errorf("readiness while draining = %d, want 503", got)
	}
	if cp.Ready() {
		t.Error("Ready() while draining")
	}
	select {
	case err := <-done:
		t.Fatalf("Run returned while still in the endpoints: %v", err)
	default:
	}
	close(out)
	if err := <-done; err != nil {
		t.Errorf("run: %v", err)
	}
	if got := status(); got != 0 {
		t.Errorf("probe server still answers %d after the drain", got)
	}
}
