package forwardsource

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/meshdns/meshdns/internal/kubetest"
)

// cluster is one real etcd + kube-apiserver for the package's tests,
// started by the first test that needs it.
var cluster = kubetest.NewShared()

// TestMain fails the package when a File's or a pod watch's goroutines
// outlive their test.
func TestMain(m *testing.M) {
	code := m.Run()
	cluster.Stop()
	if f := flag.Lookup("test.fuzzworker"); code == 0 && (f == nil || f.Value.String() != "true") {
		// client-go's shared transports and klog's flush daemon are
		// process-wide, not ours.
		if err := goleak.Find(
			goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
			goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
			goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
