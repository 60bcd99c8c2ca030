package discovery

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// crashName is CrashName (crashtest.go), which only the meshdns_crashtest
// tag compiles.
const crashName = "crash-on-apply.meshdns.test"

// The crash trigger is compiled into test builds only: the binaries
// shipped, built without the tag, hold no trace of it, and a build with
// the tag does (so the check is not vacuous).
func TestShippedBinariesHaveNoCrashTrigger(t *testing.T) {
	if testing.Short() && os.Getenv("CI") == "" {
		t.Skip("links three binaries; -short outside CI")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	for _, tc := range []struct {
		name string
		pkg  string
		tags []string
		want bool
	}{
		{name: "agent image", pkg: "./cmd/meshdns-agent"},
		{name: "cli", pkg: "./cmd/meshdns"},
		{name: "agent built for crash tests", pkg: "./cmd/meshdns-agent", tags: []string{"-tags", "meshdns_crashtest"}, want: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bin := filepath.Join(t.TempDir(), "bin")
			args := append([]string{"build", "-o", bin}, tc.tags...)
			cmd := exec.Command(goTool, append(args, tc.pkg)...)
			cmd.Dir = filepath.Join("..", "..")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("go build %s: %v\n%s", tc.pkg, err, out)
			}
			b, err := os.ReadFile(bin)
			if err != nil {
				t.Fatal(err)
			}
			if got := bytes.Contains(b, []byte(crashName)); got != tc.want {
				t.Errorf("%s holds %q: %v, want %v", tc.pkg, crashName, got, tc.want)
			}
		})
	}
}
