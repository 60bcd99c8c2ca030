package forwardsource

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a File's goroutines outlive their test.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
