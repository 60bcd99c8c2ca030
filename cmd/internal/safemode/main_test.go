package safemode

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that every episode's goroutines (readers, answers, the
// probe server) end with it.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
