package netnstest

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

// CopyTestBinary copies the running test binary into dir, or into a new
// directory removed when the test ends when dir is "", readable and
// executable by every user: a helper role started as another uid (the
// agent's, with setpriv) cannot run it from the go command's private
// build directory.
func CopyTestBinary(t testing.TB, dir string) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if dir == "" {
		if dir, err = os.MkdirTemp("", "meshdns-netnstest-"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	dst := filepath.Join(dir, filepath.Base(self))
	if err := os.WriteFile(dst, data, 0o755); err != nil {
		t.Fatal(err)
	}
	return dst
}

// ReadyTimeout bounds how long Start waits for a helper's "ready".
const ReadyTimeout = 10 * time.Second

// Start runs argv with env added to this process's environment until the
// test ends, and waits until its first line of output is "ready". Its
// standard error is logged if the test fails.
func Start(t testing.TB, env []string, argv ...string) {
	t.Helper()
	if !start(t, env, argv, true) {
		t.Fatalf("%q failed to start", argv)
	}
}

// StartBackground runs argv like Start, without waiting for anything: for
// programs that print no "ready" line.
func StartBackground(t testing.TB, env []string, argv ...string) {
	t.Helper()
	start(t, env, argv, false)
}

func start(t testing.TB, env, argv []string, wait bool) bool {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	var logs testenv.Buffer
	cmd.Stderr = &logs
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("%q:\n%s", argv, logs.String())
		}
	})
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		ready <- sc.Scan() && sc.Text() == "ready"
		for sc.Scan() {
		}
	}()
	if !wait {
		return true
	}
	select {
	case ok := <-ready:
		return ok
	case <-time.After(ReadyTimeout):
		t.Fatalf("%q did not print ready within %v", argv, ReadyTimeout)
		return false
	}
}
