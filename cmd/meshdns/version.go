package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"sync"

	"github.com/meshdns/meshdns/internal/metrics"
)

// version and revision are set at build time by the Makefile: -ldflags
// "-X main.version=v1.2.3 -X main.revision=<commit>". Empty, the build
// info recorded by the go command is used: the module version (go install
// ...@v1.2.3) and the VCS revision, else "dev" and "unknown".
var version, revision string

func init() {
	commands["version"] = command{
		summary: "print the version, the source revision and the Go version of this binary",
		run: func(_ context.Context, args []string, stdout, _ io.Writer) error {
			fs := flag.NewFlagSet("version", flag.ContinueOnError)
			fs.SetOutput(stdout)
			if err := parseFlags(fs, args, nil); err != nil {
				return err
			}
			return printVersion(stdout)
		},
	}
}

// build describes this binary.
type build struct {
	Version   string // v1.2.3, or "dev"
	Revision  string // VCS revision, "+dirty" appended for modified trees; "unknown" without VCS data
	GoVersion string
}

// buildInfo reads the version from the ldflags or the module build info,
// and the revision from the VCS stamp the go command records.
var buildInfo = sync.OnceValue(func() build {
	b := build{Version: version, Revision: revision, GoVersion: runtime.Version()}
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

// printVersion is `meshdns version` and `meshdns --version`.
func printVersion(w io.Writer) error {
	b := buildInfo()
	_, err := fmt.Fprintf(w, "meshdns %s (revision %s, %s %s/%s)\n", b.Version, b.Revision, b.GoVersion, runtime.GOOS, runtime.GOARCH)
	return err
}

// meshdns_build_info is on the agent's and the control plane's /metrics:
// always 1, the labels say which build runs, so a dashboard can count
// versions across a fleet during a rollout. The agent registers it on its
// own metrics registry (agentBuildInfo), the control plane on
// client_golang's (buildInfoCollector, version_controlplane.go); both
// from these.
const (
	buildInfoName = "meshdns_build_info"
	buildInfoHelp = "Always 1; the labels name the version, source revision and Go version of the running binary."
)

// agentBuildInfo is meshdns_build_info for the agent's registry.
func agentBuildInfo() *metrics.GaugeFunc {
	b := buildInfo()
	return metrics.NewConstLabelGaugeFunc(metrics.Opts{Name: buildInfoName, Help: buildInfoHelp},
		[]string{"version", "revision", "goversion"}, []string{b.Version, b.Revision, b.GoVersion},
		func() float64 { return 1 })
}
