package mcssource

import (
	"testing"

	"go.uber.org/goleak"
)

// The source must stop every goroutine it started (informers, the recheck
// loop). Idle keep-alive connections of client-go's shared transports and
// klog's flush daemon are process-wide, not the source's.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
	)
}
