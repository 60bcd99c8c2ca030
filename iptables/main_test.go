package iptables

import (
	"os"
	"testing"

	"github.com/meshdns/meshdns/internal/testkit/netnstest"
)

// TestMain lets the test binary act as the UDP helpers of internal/testkit/netnstest,
// so the race test can start processes inside network namespaces and as
// other users with only ip netns exec and setpriv.
func TestMain(m *testing.M) {
	if code, ok := netnstest.Role(); ok {
		os.Exit(code)
	}
	os.Exit(m.Run())
}
