package node

import (
	"bufio"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

// TestHelmInstall runs examples/kubernetes/install-check.sh, the install a
// user follows (docs/install.md), on a real API server and a real kubelet
// node: helm install from charts/meshdns with the image built here, a
// labelled namespace whose pod is injected and resolves a Service and an
// outside name, a DNSPolicy that denies a name, the denial in the pod's
// query log, meshdns status and analyze reading the install, and helm
// uninstall leaving the DNSPolicy and DNS working. Each step of the script
// asserts what it shows; the test passes when the script exits 0.
//
// The API server runs with no Pod Security default (privileged, as a
// cluster without one) and the parts of a cluster that do not run here
// are played by clusterStandIn. The helm install gets, beyond the image,
// what this node needs: one replica (host networking gives every replica
// the same ports), the image never pulled, and the API server's address
// (its loopback, for in-cluster configuration).
func TestHelmInstall(t *testing.T) {
	helm := helmBinary(t)
	kubectl := filepath.Join(testenv.KubeAssets(t), "kubectl")
	if _, err := os.Stat(kubectl); err != nil {
		testenv.Unavailable(t, "needs kubectl in %s (make deps installs it)", filepath.Dir(kubectl))
	}
	e := startNode(t)
	runClusterStandIn(t, e, "meshdns-system")
	api, err := url.Parse(e.c.URL)
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	cmd := exec.Command("sh", "examples/kubernetes/install-check.sh")
	cmd.Dir = "../.."
	cmd.Env = append(os.Environ(),
		"KUBECONFIG="+e.c.Kubeconfig, "HELM="+helm, "KUBECTL="+kubectl, "MESHDNS="+e.meshdns,
		"HELM_CONFIG_HOME="+home, "HELM_CACHE_HOME="+home, "HELM_DATA_HOME="+home,
		"IMAGE_REPOSITORY=localhost/meshdns", "IMAGE_TAG=test",
		`HELM_ARGS=--set image.pullPolicy=Never --set replicas=1 --set-json extraEnv=[`+
			`{"name":"KUBERNETES_SERVICE_HOST","value":"`+api.Hostname()+`"},`+
			`{"name":"KUBERNETES_SERVICE_PORT","value":"`+api.Port()+`"}]`,
		"CHECK_IMAGE=localhost/testapp:test", "CHECK_COMMAND=/bin/testapp -every 1h", "RESOLVE=/bin/testapp -check",
		"OUTSIDE_NAME=www.example.org", "DENIED_NAME=denied.example.org")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	logLines(t, out, start)
	if err := cmd.Wait(); err != nil {
		t.Errorf("install-check.sh: %v", err)
		t.Logf("control plane log:\n%s", tail(e.n.ContainerLog("meshdns-system", "meshdns-controlplane-1", "controlplane"), 4000))
		t.Logf("node:\n%s", tail(e.n.Logs(), 6000))
		return
	}
	t.Logf("install-check.sh passed in %.1fs", time.Since(start).Seconds())
	if n := e.standIn.asked("meshdns-controlplane.meshdns-system.svc.cluster.local."); n == 0 {
		t.Errorf("no agent looked up the control plane's Service name: the injected agent dialed something else")
	}
}

// logLines logs each line of the script's output with the time since it
// started, so a slow step shows in the test log.
func logLines(t *testing.T, r io.Reader, start time.Time) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if strings.TrimSpace(line) != "" {
			t.Logf("%5.1fs %s", time.Since(start).Seconds(), line)
		}
	}
}

// helmBinary is the helm make deps builds (or $HELM).
func helmBinary(t *testing.T) string {
	t.Helper()
	if h := os.Getenv("HELM"); h != "" {
		return h
	}
	home, _ := os.UserHomeDir()
	h := filepath.Join(home, ".cache", "meshdns", "helm", "helm")
	if _, err := os.Stat(h); err != nil {
		testenv.Unavailable(t, "needs helm in %s (make deps builds it)", h)
	}
	return h
}
