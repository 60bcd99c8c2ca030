// Command crashagent is a test-only build of the sidecar's binary for the
// supervisor's tests: a supervised agent (one started with inherited
// sockets) exits with status 3 at start while the file named by
// CRASHAGENT_WHILE exists, as an agent of a bad image would. The
// supervisor and every other command are the real ones. It lives under
// testdata so that no shipped binary carries the trigger.
package main

import (
	"os"

	"github.com/meshdns/meshdns/cmd/internal/agentcmd"
	"github.com/meshdns/meshdns/cmd/internal/cli"
)

func main() {
	if os.Getenv("MESHDNS_INHERITED_FDS") != "" {
		if f := os.Getenv("CRASHAGENT_WHILE"); f != "" {
			if _, err := os.Stat(f); err == nil {
				os.Stderr.WriteString("crashagent: crashing at start\n")
				os.Exit(3)
			}
		}
	}
	cli.Register("agent", agentcmd.Command)
	cli.Main("test", "test")
}
