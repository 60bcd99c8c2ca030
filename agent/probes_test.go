package agent

import (
	"errors"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestProbePortFromAnotherPod stands 127.0.0.2 for the pod IP another pod
// reaches: there the probe port answers readiness, liveness and metrics,
// nothing else, and the admin port is not listening at all.
func TestProbePortFromAnotherPod(t *testing.T) {
	up := startUpstream(t)
	path := writeFile(t, t.TempDir(), "nametable.json", readExample(t))
	a := startAgent(t, Config{NameTableFile: path, Upstreams: []string{up.addr}, ProbeAddr: "0.0.0.0:0"})
	_, probePort, _ := net.SplitHostPort(a.ProbeAddr().String())
	_, adminPort, _ := net.SplitHostPort(a.AdminAddr().String())
	probe := "http://127.0.0.2:" + probePort
	eventually(t, "ready on the probe port", func() bool {
		code, _ := httpGet(t, probe+"/healthz/ready")
		return code == http.StatusOK
	})
	tests := []struct {
		method, path string
		want         int
	}{
		{method: "GET", path: "/healthz/ready", want: http.StatusOK},
		{method: "GET", path: "/healthz/live", want: http.StatusOK},
		{method: "GET", path: "/metrics", want: http.StatusOK},
		{method: "GET", path: "/debug/nametable", want: http.StatusNotFound},
		{method: "GET", path: "/debug/lookup?name=web.demo", want: http.StatusNotFound},
		{method: "PUT", path: "/debug/loglevel?level=debug", want: http.StatusNotFound},
		{method: "GET", path: "/debug/pprof/", want: http.StatusNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, probe+tc.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if diff := cmp.Diff(tc.want, res.StatusCode); diff != "" {
				t.Errorf("status (-want +got):\n%s", diff)
			}
		})
	}
	t.Run("admin port", func(t *testing.T) {
		_, err := net.DialTimeout("tcp", "127.0.0.2:"+adminPort, time.Second)
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("dial the admin port at 127.0.0.2: %v, want connection refused", err)
		}
		if code, _ := httpGet(t, a.admin+"/debug/nametable"); code != http.StatusOK {
			t.Errorf("admin on loopback: /debug/nametable %d, want 200", code)
		}
	})
}

func TestAdminAddrLoopbackOnly(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:15020", "10.0.0.5:15020", ":15020"} {
		if _, err := New(Config{AdminAddr: addr, Upstreams: []string{"127.0.0.1:53"}}); err == nil || !strings.Contains(err.Error(), "loopback") {
			t.Errorf("AdminAddr %s: err %v, want a loopback error", addr, err)
		}
	}
	for _, addr := range []string{"127.0.0.1:15020", "[::1]:15020", "localhost:15020", "-"} {
		if _, err := New(Config{AdminAddr: addr, Upstreams: []string{"127.0.0.1:53"}}); err != nil {
			t.Errorf("AdminAddr %s: %v", addr, err)
		}
	}
}

// TestDebugLookupBound: /debug/lookup holds at most maxDebugLookups of the
// forwarder's slots; more get 429 at once instead of queueing behind the
// application's queries.
func TestDebugLookupBound(t *testing.T) {
	up := startUpstream(t)
	path := writeFile(t, t.TempDir(), "nametable.json", readExample(t))
	a := startAgent(t, Config{NameTableFile: path, Upstreams: []string{up.addr}})
	// Hold every slot, as lookups stuck on a silent upstream would.
	for range maxDebugLookups {
		a.aux.lookups <- struct{}{}
	}
	if code, _ := httpGet(t, a.admin+"/debug/lookup?name=web.demo"); code != http.StatusTooManyRequests {
		t.Errorf("lookup beyond the bound: %d, want 429", code)
	}
	<-a.aux.lookups
	if code, body := httpGet(t, a.admin+"/debug/lookup?name=web.demo"); code != http.StatusOK {
		t.Errorf("lookup within the bound: %d %s, want 200", code, body)
	}
}
