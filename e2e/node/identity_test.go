package node

import (
	"context"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/meshdns/meshdns/internal/testkit/certtest"
	"github.com/meshdns/meshdns/internal/testkit/kubetest"
	"github.com/meshdns/meshdns/internal/testkit/nodetest"
)

// defaultServiceAccounts does the job of kube-controller-manager's service
// account controller, which does not run here: every namespace, existing or
// new, gets its "default" ServiceAccount, without which the ServiceAccount
// admission plugin rejects the namespace's pods.
func defaultServiceAccounts(t *testing.T, c *kubetest.Cluster) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	create := func(ns string) {
		_, err := c.Client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{
			ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) && ctx.Err() == nil {
			t.Logf("default service account in %s: %v", ns, err)
		}
	}
	go func() {
		// A watch without a resource version starts with every existing
		// namespace; the API server ends watches after a while, so it is
		// opened again until the test ends.
		for ctx.Err() == nil {
			w, err := c.Client.CoreV1().Namespaces().Watch(ctx, metav1.ListOptions{})
			if err != nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			for ev := range w.ResultChan() {
				if ns, ok := ev.Object.(*corev1.Namespace); ok && ev.Type == watch.Added {
					create(ns.Name)
				}
			}
			w.Stop()
		}
	}()
}

// createNamespace creates a namespace and its "default" ServiceAccount at
// once, so the namespace's first pod does not race the account's creation.
func (e *env) createNamespace(t *testing.T, ctx context.Context, name string, labels map[string]string) {
	t.Helper()
	cs := e.c.Client
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ServiceAccounts(name).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}},
		metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// vmCredentials is the mTLS material of the VM mode, as an operator makes
// it for examples/overlays/vm: the second control plane's serving
// certificate (for the node address the VM dials) and client CA, and the
// VM's client certificate with its SPIFFE ID.
type vmCredentials struct {
	ca, serverCert, serverKey, clientCert, clientKey string
}

func newVMCredentials(t *testing.T, dir, ns, sa string) vmCredentials {
	t.Helper()
	ca := certtest.NewCA(t, "meshdns vm test CA")
	var v vmCredentials
	for _, d := range []string{"vm-server", "vm-client"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	v.ca = certtest.Write(t, dir, "vm-ca.crt", ca.PEM)
	nodeIP := func(c *x509.Certificate) { c.IPAddresses = append(c.IPAddresses, net.IP(nodetest.NodeIP.AsSlice())) }
	cert, key := ca.Issue(t, "meshdns-controlplane-vm", true, nodeIP)
	v.serverCert, v.serverKey = certtest.WritePair(t, filepath.Join(dir, "vm-server"), cert, key)
	cert, key = ca.Issue(t, "node1-host", false, certtest.URIs("spiffe://cluster.local/ns/"+ns+"/sa/"+sa))
	v.clientCert, v.clientKey = certtest.WritePair(t, filepath.Join(dir, "vm-client"), cert, key)
	return v
}

// admissions returns the control plane's meshdns_controlplane_stream_admissions_total
// for one result and method, read from its loopback admin port.
func (e *env) admissions(t *testing.T, result, method string) int {
	t.Helper()
	r, err := http.Get("http://" + e.adminAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	prefix := `meshdns_controlplane_stream_admissions_total{method="` + method + `",result="` + result + `"} `
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, prefix); ok {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return int(n)
		}
	}
	return 0
}

// testForeignNamespace runs an injected pod in another namespace: its agent,
// admitted with its own namespace's token, answers the services every
// namespace sees and not one exported only to demo.
func testForeignNamespace(t *testing.T, ctx context.Context, e *env, webIP string) {
	t.Helper()
	e.createNamespace(t, ctx, "other", map[string]string{"meshdns.io/inject": "enabled", "pod-security.kubernetes.io/enforce": "privileged"})
	before := e.admissions(t, "ok", "token")
	names := []string{"web.demo", "only.demo"}
	if _, err := e.c.Client.CoreV1().Pods("other").Create(ctx, appPod("app", names), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var got map[string]string
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		// only.demo counts from the first lookup after web.demo was
		// answered, that is after the agent had its table.
		got = map[string]string{}
		for _, line := range strings.Split(e.n.ContainerLog("other", "app", "app"), "\n") {
			if f := strings.SplitN(line, " ", 4); len(f) == 4 && f[0] == "RESULT" && (f[2] == "web.demo" || got["web.demo"] == "ok "+webIP) {
				got[f[2]] = f[3]
			}
		}
		if got["web.demo"] == "ok "+webIP && got["only.demo"] != "" {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if got["web.demo"] != "ok "+webIP {
		t.Fatalf("the pod in namespace other never resolved web.demo through its agent: %v", got)
	}
	if !strings.HasPrefix(got["only.demo"], "err ") {
		t.Errorf("a pod in namespace other resolved only.demo, exported to demo only: %q", got["only.demo"])
	}
	if after := e.admissions(t, "ok", "token"); after <= before {
		t.Errorf("the pod in namespace other was not admitted by its token (%d, then %d)", before, after)
	}
	t.Logf("namespace other: web.demo %q, only.demo %q", got["web.demo"], got["only.demo"])
}
