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

func TestMain(m *testing.M) {
	switch role := os.Getenv(roleEnv); role {
	case "":
		os.Exit(m.Run())
	case "upstream":
		os.Exit(runUpstream())
	case "resolve":
		os.Exit(runResolve())
	default:
		fmt.Fprintf(os.Stderr, "unknown %s %q\n", roleEnv, role)
		os.Exit(2)
	}
}
