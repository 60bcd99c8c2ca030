package kubernetes_test

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/meshdns/meshdns/internal/testkit/buildtest"
	"github.com/meshdns/meshdns/internal/testkit/certtest"
	"github.com/meshdns/meshdns/internal/testkit/kubetest"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

var meshdnsBinary = &buildtest.Binary{Pkg: "github.com/meshdns/meshdns/cmd/meshdns"}

func TestMain(m *testing.M) {
	code := m.Run()
	meshdnsBinary.Remove()
	os.Exit(code)
}

// TestVMControlPlaneRuns runs the real control plane with the VM
// overlay's arguments under the overlay's own ServiceAccount (the admin
// certificate impersonating it) on an API server with RBAC on: it gets
// ready, and until it is stopped nothing it asks the API server for is
// forbidden (a default that needs more than the least-privilege account
// holds, such as the pod zone's watch of Nodes, shows up here).
func TestVMControlPlaneRuns(t *testing.T) {
	objs := render(t, "overlays/vm", "")
	var d appsv1.Deployment
	find(t, objs, "Deployment", "meshdns-controlplane-vm", &d)
	bin := meshdnsBinary.Path(t)

	kc := kubetest.Start(t, kubetest.WithRBAC())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := newCluster(t, kc)
	var install []*unstructured.Unstructured
	for _, o := range objs {
		switch o.GetKind() {
		case "Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "CustomResourceDefinition":
			install = append(install, o)
		}
	}
	c.apply(ctx, install, false)

	dir := t.TempDir()
	ca := certtest.NewCA(t, "vm-ca")
	crt, key := ca.Issue(t, "meshdns-controlplane-vm", true)
	files := map[string][]byte{"tls.crt": crt, "tls.key": key, "ca.crt": ca.PEM}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	kubeconfig := impersonatingKubeconfig(t, kc, dir, "system:serviceaccount:meshdns-system:meshdns-controlplane-vm")
	probe := freeAddr(t)
	var args []string
	for _, a := range d.Spec.Template.Spec.Containers[0].Args {
		flag, value, _ := strings.Cut(a, "=")
		switch flag {
		case "--grpc-addr", "--admin-addr":
			a = flag + "=" + freeAddr(t)
		case "--probe-addr":
			a = flag + "=" + probe
		case "--tls-cert", "--tls-key", "--client-ca":
			a = flag + "=" + filepath.Join(dir, filepath.Base(value))
		}
		args = append(args, a)
	}
	args = append(args, "--kubeconfig="+kubeconfig) // the pod's own account, in a pod
	logPath := filepath.Join(dir, "controlplane.log")
	cp, err := kubetest.StartProcess("controlplane-vm", bin, logPath, args)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cp.Stop(5 * time.Second) })
	testenv.Eventually(t, "the VM control plane ready", time.Minute, func() bool {
		if cp.Exited() {
			t.Fatalf("the VM control plane exited:\n%s", cp.Tail(4000))
		}
		r, err := http.Get("http://" + probe + "/healthz/ready")
		if err != nil {
			return false
		}
		r.Body.Close()
		return r.StatusCode == http.StatusOK
	})
	cp.Stop(5 * time.Second)
	log, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(log), "\n") {
		if strings.Contains(l, "forbidden") || strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") {
			t.Errorf("the VM control plane logged: %s", l)
		}
	}
}

// impersonatingKubeconfig writes a kubeconfig acting as user (the admin
// certificate impersonating it), so a process has exactly that user's RBAC.
func impersonatingKubeconfig(t *testing.T, c *kubetest.Cluster, dir, user string) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: c.URL, CertificateAuthorityData: c.CAPEM}
	cfg.AuthInfos["u"] = &clientcmdapi.AuthInfo{ClientCertificateData: c.Config.CertData, ClientKeyData: c.Config.KeyData, Impersonate: user}
	cfg.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	cfg.CurrentContext = "c"
	path := filepath.Join(dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
