package netnstest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	if code, ok := Role(); ok {
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// TestVethCarriesTraffic: two namespaces joined by Veth carry UDP and TCP
// between the echo and send roles, over IPv4 and IPv6, a sender running
// as another uid included; an address nothing listens on times out; the
// namespaces are gone once the subtest ends.
func TestVethCarriesTraffic(t *testing.T) {
	self := CopyTestBinary(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var names []string
	t.Run("veth", func(t *testing.T) {
		for _, c := range []struct{ cidrA, cidrB, a, b string }{
			{"198.18.0.1/24", "198.18.0.2/24", "198.18.0.1", "198.18.0.2"},
			{"fd00:198:18::1/64", "fd00:198:18::2/64", "[fd00:198:18::1]", "[fd00:198:18::2]"},
		} {
			a, b := New(t, "mdnt"), New(t, "mdnt")
			names = append(names, a, b)
			Veth(t, a, c.cidrA, b, c.cidrB)
			StartEcho(t, self, a, nil, c.a+":5353", "pong")
			for _, network := range []string{"udp", "udp-any", "tcp"} {
				if got := Send(ctx, t, self, b, nil, network, c.b+":40001", c.a+":5353"); got != "pong" {
					t.Errorf("%s %s from %s: %q, want pong", network, c.a, b, got)
				}
			}
			if _, err := exec.LookPath("setpriv"); err == nil {
				as := As(1337)
				if got := Send(ctx, t, self, b, as, "udp", c.b+":40002", c.a+":5353"); got != "pong" {
					t.Errorf("udp %s from %s as uid 1337: %q, want pong", c.a, b, got)
				}
			}
			if got := Send(ctx, t, self, b, nil, "udp", c.b+":40003", c.a+":5354"); got != "timeout" {
				t.Errorf("udp to a closed port: %q, want timeout", got)
			}
			// The loopback is up, as in a pod.
			out, err := exec.Command("ip", "-n", a, "-o", "link", "show", "lo").CombinedOutput()
			if err != nil || !strings.Contains(string(out), "UP") {
				t.Errorf("lo in %s: %s, %v; want it up", a, out, err)
			}
		}
	})
	for _, n := range names {
		if _, err := os.Stat(filepath.Join("/run/netns", n)); !os.IsNotExist(err) {
			t.Errorf("namespace %s still exists after its test: %v", n, err)
		}
	}
}

// TestStartNotReady: a helper whose first line is not "ready" is reported,
// not waited for until the timeout.
func TestStartNotReady(t *testing.T) {
	if start(t, nil, []string{"sh", "-c", "echo nope; exec sleep 30"}, true) {
		t.Error("a helper printing nope was taken for ready")
	}
	if !start(t, nil, []string{"sh", "-c", "echo ready; exec sleep 30"}, true) {
		t.Error("a helper printing ready was not taken for ready")
	}
}
