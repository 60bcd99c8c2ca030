package netnstest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const roleEnv = "MESHDNS_NETNSTEST_ROLE"

func TestMain(m *testing.M) {
	switch os.Getenv(roleEnv) {
	case "":
		os.Exit(m.Run())
	case "echo":
		// Answers one UDP datagram per read with "pong".
		c, err := net.ListenPacket("udp", os.Getenv("ADDR"))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println("ready")
		buf := make([]byte, 64)
		for {
			_, from, err := c.ReadFrom(buf)
			if err != nil {
				os.Exit(1)
			}
			c.WriteTo([]byte("pong"), from)
		}
	case "ping":
		c, err := net.Dial("udp", os.Getenv("ADDR"))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		c.Write([]byte("ping"))
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		buf := make([]byte, 64)
		n, err := c.Read(buf)
		if err != nil {
			fmt.Println("timeout")
			os.Exit(0)
		}
		fmt.Println(string(buf[:n]))
		os.Exit(0)
	}
	os.Exit(2)
}

// TestVethCarriesTraffic: two namespaces joined by Veth exchange a UDP
// datagram between helpers that Start runs inside them, over IPv4 and
// IPv6; the namespaces are gone once the subtest ends.
func TestVethCarriesTraffic(t *testing.T) {
	self := CopyTestBinary(t, "")
	var names []string
	t.Run("veth", func(t *testing.T) {
		a, b := New(t, "mdnt"), New(t, "mdnt")
		names = append(names, a, b)
		Veth(t, a, "198.18.0.1/24", b, "198.18.0.2/24")
		a6, b6 := New(t, "mdnt"), New(t, "mdnt")
		names = append(names, a6, b6)
		Veth(t, a6, "fd00:198:18::1/64", b6, "fd00:198:18::2/64")
		for _, c := range []struct{ server, client, addr string }{
			{a, b, "198.18.0.1:5353"},
			{a6, b6, "[fd00:198:18::1]:5353"},
		} {
			Start(t, []string{roleEnv + "=echo", "ADDR=" + c.addr}, "ip", "netns", "exec", c.server, self)
			cmd := exec.Command("ip", "netns", "exec", c.client, self)
			cmd.Env = append(os.Environ(), roleEnv+"=ping", "ADDR="+c.addr)
			out, err := cmd.CombinedOutput()
			if got := strings.TrimSpace(string(out)); err != nil || got != "pong" {
				t.Errorf("ping %s from %s: %q, %v; want pong", c.addr, c.client, got, err)
			}
		}
		// The loopback is up, as in a pod.
		out, err := exec.Command("ip", "-n", a, "-o", "link", "show", "lo").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "UP") {
			t.Errorf("lo in %s: %s, %v; want it up", a, out, err)
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
