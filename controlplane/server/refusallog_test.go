package server_test

import (
	"log/slog"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/meshdns/meshdns/controlplane/auth"
	"github.com/meshdns/meshdns/controlplane/internal/cptest"
	"github.com/meshdns/meshdns/controlplane/server"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

// Agents retrying without a credential are all refused and counted, but
// only the first few refusals of a window are logged.
func TestRefusalsLogLimited(t *testing.T) {
	ta, err := auth.TokenReview(auth.TokenReviewConfig{Reviewer: reviewer{}})
	if err != nil {
		t.Fatal(err)
	}
	var logs testenv.Buffer
	h := newHarness(t, harnessOpts{server: func(c *server.Config) {
		c.Authenticator = ta
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	}})
	h.publish(t, entry("all.corp.example", "10.0.0.1"))
	const tries = 15
	for range tries {
		a := cptest.Dial(t, h.addr, cptest.DialOpts{Namespace: "ns-a", Pod: "web-a"})
		if got := outcome(t, a); got != codes.Unauthenticated {
			t.Fatalf("outcome %v, want Unauthenticated", got)
		}
	}
	if got := h.metric(t, "meshdns_controlplane_stream_admissions_total", "result", "unauthenticated", "method", "none"); got != tries {
		t.Errorf("unauthenticated admissions = %v, want %d", got, tries)
	}
	if got := strings.Count(logs.String(), "agent stream refused"); got != 10 {
		t.Errorf("%d refusals logged, want 10 (the burst of a window):\n%s", got, logs.String())
	}
}
