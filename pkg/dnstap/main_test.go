package dnstap

import (
	"testing"

	"go.uber.org/goleak"
)

// Run and each connection start goroutines: none may outlive its test.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
