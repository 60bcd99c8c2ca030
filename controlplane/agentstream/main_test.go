package agentstream

import (
	"testing"

	"go.uber.org/goleak"
)

// Every goroutine of a connection (its reader, a stream's Open, a
// flusher) ends with it: a test that leaves one behind fails.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
