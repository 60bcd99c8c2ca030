package kubesource

import (
	"testing"

	"github.com/meshdns/meshdns/internal/testkit/kubetest"
)

// cluster is one real etcd + kube-apiserver for the package's integration
// tests, started by the first test that needs it.
var cluster = kubetest.NewShared()

func TestMain(m *testing.M) { cluster.Main(m) }
