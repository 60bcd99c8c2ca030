package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"sync"
)

// Every binary has the version command.
func init() {
	Register("version", Command{
		Summary: "print the version, the source revision and the Go version of this binary",
		Run: func(_ context.Context, args []string, stdout, _ io.Writer) error {
			fs := flag.NewFlagSet("version", flag.ContinueOnError)
			fs.SetOutput(stdout)
			if err := ParseFlags(fs, args, nil); err != nil {
				return err
			}
			return printVersion(stdout)
		},
	})
}

// stamp is the version and revision of the binary, set at build time in
// its main package (the Makefile: -ldflags "-X main.version=v1.2.3 -X
// main.revision=<commit>") and handed over by Main. Empty, the build info
// recorded by the go command is used: the module version (go install
// ...@v1.2.3) and the VCS revision, else "dev" and "unknown".
var stamp struct{ version, revision string }

// Stamp sets the build stamps BuildInfo reports; it must come before the
// first BuildInfo (Main calls it first).
func Stamp(version, revision string) {
	stamp.version, stamp.revision = version, revision
}

// Build describes this binary.
type Build struct {
	Version   string // v1.2.3, or "dev"
	Revision  string // VCS revision, "+dirty" appended for modified trees; "unknown" without VCS data
	GoVersion string
}

// BuildInfo reads the version from the build stamp or the module build
// info, and the revision from the VCS stamp the go command records.
var BuildInfo = sync.OnceValue(func() Build {
	b := Build{Version: stamp.version, Revision: stamp.revision, GoVersion: runtime.Version()}
	info, ok := debug.ReadBuildInfo()
	if ok {
		if b.Version == "" && info.Main.Version != "" && info.Main.Version != "(devel)" {
			b.Version = info.Main.Version
		}
		var rev string
		var dirty bool
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if b.Revision == "" && rev != "" {
			b.Revision = rev
			if dirty {
				b.Revision += "+dirty"
			}
		}
	}
	if b.Version == "" {
		b.Version = "dev"
	}
	if b.Revision == "" {
		b.Revision = "unknown"
	}
	return b
})

// printVersion is `meshdns version` and `meshdns --version`: one line,
// the program's name then the version, as `meshdns v1.2.3 (revision ...)`.
func printVersion(w io.Writer) error {
	b := BuildInfo()
	_, err := fmt.Fprintf(w, "%s %s (revision %s, %s %s/%s)\n", program, b.Version, b.Revision, b.GoVersion, runtime.GOOS, runtime.GOARCH)
	return err
}

// meshdns_build_info is on the agent's and the control plane's /metrics:
// always 1, the labels say which build runs, so a dashboard can count
// versions across a fleet during a rollout. The agent registers it on its
// own metrics registry (cmd/internal/agentcmd), the control plane on
// client_golang's (cmd/meshdns); both from these and BuildInfo.
const (
	BuildInfoName = "meshdns_build_info"
	BuildInfoHelp = "Always 1; the labels name the version, source revision and Go version of the running binary."
)
