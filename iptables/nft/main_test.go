package nft

import (
	"os"
	"testing"

	"github.com/meshdns/meshdns/internal/testkit/netnstest"
)

// TestMain lets the test binary act as the UDP and TCP helpers of
// internal/testkit/netnstest inside network namespaces (started with ip netns
// exec, as another user with setpriv).
func TestMain(m *testing.M) {
	if code, ok := netnstest.Role(); ok {
		os.Exit(code)
	}
	os.Exit(m.Run())
}
