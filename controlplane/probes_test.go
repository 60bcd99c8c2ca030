package controlplane_test

import (
	"errors"
	"net"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/meshdns/meshdns/controlplane"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

// TestProbePortFromAnotherPod stands 127.0.0.2 for the control plane's pod
// IP as another pod reaches it: the probe port answers health and metrics
// and nothing else; the admin port (agents, peers, every namespace's
// table, log level, profiles) is not listening there.
func TestProbePortFromAnotherPod(t *testing.T) {
	pl, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, controlplane.Config{Entries: []string{t.TempDir()}, ProbeListener: pl})
	_, probePort, _ := net.SplitHostPort(pl.Addr().String())
	_, adminPort, _ := net.SplitHostPort(r.admin[len("http://"):])
	probe := "http://127.0.0.2:" + probePort
	tests := []struct {
		method, path string
		want         int
	}{
		{method: "GET", path: "/healthz/live", want: http.StatusOK},
		{method: "GET", path: "/metrics", want: http.StatusOK},
		{method: "GET", path: "/debug/agents", want: http.StatusNotFound},
		{method: "GET", path: "/debug/nametable?namespace=demo", want: http.StatusNotFound},
		{method: "PUT", path: "/debug/loglevel?level=debug", want: http.StatusNotFound},
		{method: "GET", path: "/debug/pprof/", want: http.StatusNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			code, _ := testenv.HTTP(t, tc.method, probe+tc.path, "", nil, "")
			if diff := cmp.Diff(tc.want, code); diff != "" {
				t.Errorf("status (-want +got):\n%s", diff)
			}
		})
	}
	t.Run("admin port", func(t *testing.T) {
		_, err := net.DialTimeout("tcp", "127.0.0.2:"+adminPort, time.Second)
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("dial the admin port at 127.0.0.2: %v, want connection refused", err)
		}
		if code, _ := testenv.HTTP(t, "GET", r.admin+"/debug/agents", "", nil, ""); code != http.StatusOK {
			t.Errorf("admin on loopback: /debug/agents %d, want 200", code)
		}
	})
}

func TestAdminAddrLoopbackOnly(t *testing.T) {
	_, err := controlplane.New(controlplane.Config{Entries: []string{t.TempDir()}, AdminAddr: "0.0.0.0:15014"})
	if err == nil {
		t.Fatal("admin address 0.0.0.0 accepted")
	}
}
