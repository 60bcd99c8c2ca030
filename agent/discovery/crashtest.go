//go:build meshdns_crashtest

package discovery

import (
	"fmt"
	"os"
	"slices"

	"github.com/meshdns/meshdns/internal/namewire"
)

// CrashName is the name whose presence in a table makes an agent built
// with the meshdns_crashtest tag panic as it applies the table: the
// "version that crashes the agent" end-to-end tests need, which shipped
// binaries (built without the tag) never contain.
const CrashName = "crash-on-apply.meshdns.test"

// ExitAtStartEnv set (to anything) in the environment of a binary built
// with the meshdns_crashtest tag makes its agent process exit with status
// 3 as it starts, before it reads a flag: the "bad image" end-to-end tests
// need. The supervisor (`agent --supervise`) runs on, so the tests see
// what it does when no agent stays up.
const ExitAtStartEnv = "MESHDNS_CRASHTEST_EXIT_AT_START"

func init() {
	args := os.Args[1:]
	if os.Getenv(ExitAtStartEnv) == "" || len(args) == 0 || args[0] != "agent" || slices.Contains(args, "--supervise") {
		return
	}
	fmt.Fprintf(os.Stderr, "meshdns_crashtest: %s set, the agent exits at start\n", ExitAtStartEnv)
	os.Exit(3)
}

// crashOnApply panics when the table holds CrashName.
func crashOnApply(version string, t namewire.RawTable) {
	t(func(host, _ []byte) error {
		if string(host) == CrashName {
			panic("meshdns_crashtest: version " + version + " holds " + CrashName)
		}
		return nil
	}, nil)
}
