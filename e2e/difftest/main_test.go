package difftest

import (
	"os"
	"testing"

	"github.com/meshdns/meshdns/internal/testkit/kubetest"
)

var cluster = kubetest.NewShared()

func TestMain(m *testing.M) {
	code := m.Run()
	cluster.Stop()
	os.Exit(code)
}
