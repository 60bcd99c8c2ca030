package e2e

import (
	"fmt"
	"os"
	"testing"
)

// roleEnv makes the test binary play a helper program instead of running
// tests: the tests start copies of themselves inside network namespaces
// (with ip netns exec), so helpers need no separate build step.
const roleEnv = "MESHDNS_E2E_ROLE"

// roles maps a role name to its helper; each returns the exit code. Test
// files add their own helpers from an init function.
var roles = map[string]func() int{
	"upstream": runUpstream,
	"resolve":  runResolve,
}

func TestMain(m *testing.M) {
	role := os.Getenv(roleEnv)
	if role == "" {
		code := m.Run()
		meshdnsBuild.Remove()
		agentBuild.Remove()
		os.Exit(code)
	}
	run, ok := roles[role]
	if !ok {
		fmt.Fprintf(os.Stderr, "unknown %s %q\n", roleEnv, role)
		os.Exit(2)
	}
	os.Exit(run())
}
