// Package testenv lets tests that need root, a tool or built assets decide
// whether to skip or fail: outside CI they skip with the reason; in CI
// (CI=true, set by .ci/run) a missing prerequisite fails the test, so a
// skipped test is never counted as passing there.
package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// InCI reports whether the tests run under .ci/run.
func InCI() bool { return os.Getenv("CI") != "" }

// Unavailable skips the test outside CI and fails it in CI.
func Unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	if InCI() {
		t.Fatalf("prerequisite missing in CI: "+format, args...)
	}
	t.Skipf("skipping: "+format, args...)
}

// RequireRoot needs uid 0 (network namespaces, iptables).
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		Unavailable(t, "needs root")
	}
}

// RequireTool returns the path of an executable on PATH.
func RequireTool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		Unavailable(t, "needs %s on PATH (make deps installs it)", name)
	}
	return p
}

// KubeAssets returns the folder holding kube-apiserver and etcd, from
// $KUBE_ASSETS (default ~/.cache/meshdns/kube, filled by make deps).
func KubeAssets(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("KUBE_ASSETS")
	if dir == "" {
		home, _ := os.UserHomeDir()
		dir = filepath.Join(home, ".cache", "meshdns", "kube")
	}
	for _, b := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			Unavailable(t, "needs %s in %s (make deps builds it)", b, dir)
		}
	}
	return dir
}

// Eventually polls cond until it holds, failing t with "timed out waiting
// for <what>" when it still does not after within.
func Eventually(t testing.TB, what string, within time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
