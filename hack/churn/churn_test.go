package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/meshdns/meshdns/internal/testkit/buildtest"
)

var meshdns = &buildtest.Binary{Pkg: "github.com/meshdns/meshdns/cmd/meshdns"}

// TestMain lets the test binary be its own fleet process, as the tool's
// binary is.
func TestMain(m *testing.M) {
	if spec := os.Getenv(fleetEnv); spec != "" {
		if err := runFleet(spec, os.Stdin, os.Stdout); err != nil {
			os.Stderr.WriteString("churn fleet: " + err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	code := m.Run()
	meshdns.Remove()
	os.Exit(code)
}

// TestSmoke runs the model small (200 agents, 20 s of churn at the
// cluster's rates, plaintext and mTLS) against the real binary: changes
// flow, pods start and stop, and at the end no version is lost and no
// agent starved.
func TestSmoke(t *testing.T) {
	if testing.Short() || (os.Getenv("CI") == "" && os.Getenv("MESHDNS_CHURN_SMOKE") == "") {
		t.Skip("runs the control plane binary and 200 agents for a minute; CI runs it (or MESHDNS_CHURN_SMOKE=1)")
	}
	bin := meshdns.Path(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		tls  bool
	}{
		{name: "plaintext"},
		{name: "mtls", tls: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			cfg := DefaultConfig()
			cfg.Meshdns, cfg.Self, cfg.Dir, cfg.Out, cfg.Log = bin, []string{self}, t.TempDir(), &out, testWriter{t}
			cfg.Agents, cfg.TLS, cfg.Duration = 200, tc.tls, 20*time.Second
			res, err := Run(context.Background(), cfg)
			t.Log("\n" + out.String())
			if err != nil {
				t.Fatal(err)
			}
			if !res.OK() {
				t.Fatalf("lost %v, starved %v (longest gap %v), /debug/agents %q", res.Lost, res.Starved, res.MaxGap,
					res.DebugAgentsErrors)
			}
			// The run must have exercised what it judges.
			if res.Changes < 10 || res.Versions < 2 || res.Joined == 0 || res.AckMax == 0 {
				t.Errorf("too little churn to judge: %d changes, %d versions, %d pods started, ack max %v",
					res.Changes, res.Versions, res.Joined, res.AckMax)
			}
		})
	}
}

// testWriter logs the children's standard error through t.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
