// Package netnstest gives tests real network namespaces: an empty one per
// call, veth pairs between them, and helper processes inside them. Tests of
// the capture rules, the image and the end-to-end topology share it, so a
// namespace is made, named and cleaned up one way.
package netnstest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

// seq makes names unique per process: several test binaries (and several
// engineers' runs) share the machine's namespaces and interface names.
var seq atomic.Int32

// New creates an empty network namespace named prefix-<pid>-<n> with its
// loopback up, as a pod's is, and deletes it when the test ends. It needs
// root and ip(8).
func New(t testing.TB, prefix string) string {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.RequireTool(t, "ip")
	name := fmt.Sprintf("%s-%d-%d", prefix, os.Getpid(), seq.Add(1))
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", name, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", name, err, out)
		}
	})
	IP(t, "-n", name, "link", "set", "lo", "up")
	return name
}

// Open returns a descriptor of the namespace name, closed when the test
// ends (before New's cleanup deletes it: cleanups run last first).
func Open(t testing.TB, name string) int {
	t.Helper()
	f, err := os.Open(filepath.Join("/run/netns", name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return int(f.Fd())
}

// IP runs ip(8) with args and fails the test on error.
func IP(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %q: %v: %s", args, err, out)
	}
}

// Veth joins namespaces a and b with a veth pair whose ends get the
// addresses cidrA and cidrB (empty: none) and are up, and returns the
// ends' names. The ends are created inside the namespaces, so nothing
// appears in the host's; they go with the namespaces.
func Veth(t testing.TB, a, cidrA, b, cidrB string) (devA, devB string) {
	t.Helper()
	// Interface names have at most 15 bytes.
	id := fmt.Sprintf("mdv%d%d", os.Getpid()%100000, seq.Add(1))
	devA, devB = id+"a", id+"b"
	IP(t, "link", "add", devA, "netns", a, "type", "veth", "peer", "name", devB, "netns", b)
	for _, end := range []struct{ ns, dev, cidr string }{{a, devA, cidrA}, {b, devB, cidrB}} {
		if end.cidr != "" {
			args := []string{"-n", end.ns, "addr", "add", end.cidr, "dev", end.dev}
			if strings.Contains(end.cidr, ":") {
				// Usable at once, without duplicate address detection.
				args = append(args, "nodad")
			}
			IP(t, args...)
		}
		IP(t, "-n", end.ns, "link", "set", end.dev, "up")
	}
	return devA, devB
}
