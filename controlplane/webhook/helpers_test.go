package webhook

import (
	"testing"
	"time"

	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

// eventually polls cond every 20ms until it holds or 10s pass.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, what, 10*time.Second, cond)
}
