// Package buildtest builds the project's commands for tests that run them
// as processes (end-to-end, replicas, the image), once per test process:
// a go build takes seconds to minutes under the race detector, and every
// test of a package runs the same binary.
package buildtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

// Timeout bounds one build.
const Timeout = 5 * time.Minute

// Binary is a Go package built at most once per process, on first use.
// Declare it as a package variable and call Remove from TestMain.
type Binary struct {
	// Pkg is the package's import path ("github.com/meshdns/meshdns/cmd/meshdns"):
	// go resolves it from any directory of the module.
	Pkg string
	// Args are extra go build flags ("-trimpath", "-ldflags", ...).
	Args []string
	// Env is added to the environment of go build ("CGO_ENABLED=0").
	Env []string

	once sync.Once
	dir  string
	path string
	err  error
}

// Path builds the package on its first call and returns the binary's path.
// The directory is readable by every user, so a helper running as
// another uid (the agent's) may run it.
func (b *Binary) Path(t testing.TB) string {
	t.Helper()
	goTool := testenv.RequireTool(t, "go")
	b.once.Do(func() { b.path, b.err = b.build(goTool) })
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

func (b *Binary) build(goTool string) (string, error) {
	dir, err := os.MkdirTemp("", "meshdns-buildtest-")
	if err != nil {
		return "", err
	}
	b.dir = dir
	if err := os.Chmod(dir, 0o755); err != nil {
		return "", err
	}
	out := filepath.Join(dir, filepath.Base(b.Pkg))
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	args := append(append([]string{"build"}, b.Args...), "-o", out, b.Pkg)
	cmd := exec.CommandContext(ctx, goTool, args...)
	cmd.Env = append(os.Environ(), b.Env...)
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %v\n%s", b.Pkg, err, msg)
	}
	return out, nil
}

// Remove deletes what Path built. TestMain calls it after the tests: the
// binary is shared by all of them, so no one test's cleanup may.
func (b *Binary) Remove() {
	if b.dir != "" {
		os.RemoveAll(b.dir)
	}
}
