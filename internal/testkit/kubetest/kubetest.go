// Package kubetest runs a real Kubernetes control plane (etcd and
// kube-apiserver, no controllers, no nodes) on loopback for integration
// tests.
//
// The binaries come from testenv.KubeAssets ($KUBE_ASSETS, default
// ~/.cache/meshdns/kube, built by hack/get-kube.sh through make deps):
// outside CI a test without them skips, in CI it fails.
//
// One test, one cluster:
//
//	c := kubetest.Start(t)          // stopped by t.Cleanup
//	c.Client.CoreV1().Services(ns)...
//
// One cluster for a whole test package (starting one costs a few seconds):
//
//	var cluster = kubetest.NewShared()
//
//	func TestMain(m *testing.M) {
//		code := m.Run()
//		cluster.Stop()
//		os.Exit(code)
//	}
//
//	func TestX(t *testing.T) {
//		c := cluster.Get(t)
//		ns := c.Namespace(t, "x") // a fresh namespace per test isolates tests
//	}
//
// What the cluster is:
//   - etcd on two random 127.0.0.1 ports, data in a tmpfs folder when
//     /dev/shm is writable (etcd 3.4 has no --unsafe-no-fsync; tmpfs makes
//     its fsyncs free).
//   - kube-apiserver on https://127.0.0.1:<random>, serving certificate from
//     a throwaway CA (Cluster.CAPEM), admin access by a client certificate in
//     group system:masters (so it is admin under RBAC too), service-account
//     signing keys, dual-stack service CIDRs 10.96.0.0/16 and
//     fd00:10:96::/112, authorization AlwaysAllow (WithRBAC for RBAC).
//   - The ServiceAccount admission plugin is disabled: no controller creates
//     the "default" ServiceAccount, and without it every Pod create would be
//     rejected. Mutating and validating admission webhooks are on (the
//     apiserver default); register them with a url clientConfig such as
//     https://127.0.0.1:PORT/path and a caBundle: service references resolve
//     to ClusterIPs that nothing routes here.
//   - No kube-controller-manager, scheduler or kubelet: EndpointSlices, Pods
//     and namespace deletion are whatever the test writes. A deleted
//     namespace stays Terminating forever.
package kubetest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meshdns/meshdns/internal/testkit/testenv"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Default service CIDRs: dual-stack so tests can create IPv4, IPv6 and
// dual-stack ClusterIP services.
var DefaultServiceCIDRs = []string{"10.96.0.0/16", "fd00:10:96::/112"}

// Cluster is a running etcd + kube-apiserver.
type Cluster struct {
	// Config is an admin REST config (client certificate, system:masters).
	// Copy it with rest.CopyConfig before changing it.
	Config *rest.Config
	// Client is a clientset built from Config.
	Client kubernetes.Interface
	// Kubeconfig is the path of a kubeconfig file for Config (current
	// context "kubetest"), for code that takes --kubeconfig.
	Kubeconfig string
	// URL of the API server, https://127.0.0.1:PORT.
	URL string
	// CAPEM is the CA that signed the serving certificate.
	CAPEM []byte
	// Dir holds the certificates, the logs (etcd.log, kube-apiserver.log)
	// and the etcd data; removed by Stop.
	Dir string
	// EtcdURL is etcd's client URL, http://127.0.0.1:PORT.
	EtcdURL string

	etcd      *Process
	apiserver *Process
	stopped   bool
}

// Option changes how Start sets up the cluster.
type Option func(*options)

type options struct {
	args         []string // extra kube-apiserver flags, --name=value
	rbac         bool
	serviceCIDRs []string
	timeout      time.Duration
}

// WithArgs adds kube-apiserver flags in --name=value form. A flag given
// here replaces the default of the same name (for example
// "--disable-admission-plugins=" turns the ServiceAccount plugin back on).
func WithArgs(args ...string) Option {
	return func(o *options) { o.args = append(o.args, args...) }
}

// WithRBAC sets --authorization-mode=Node,RBAC instead of AlwaysAllow. The
// admin client stays a superuser (system:masters); build restricted clients
// with rest.ImpersonationConfig on a copy of Cluster.Config.
func WithRBAC() Option { return func(o *options) { o.rbac = true } }

// WithServiceCIDRs replaces DefaultServiceCIDRs (one or two CIDRs).
func WithServiceCIDRs(cidrs ...string) Option {
	return func(o *options) { o.serviceCIDRs = cidrs }
}

// WithStartTimeout bounds how long Start waits for /readyz; zero means 90
// seconds (a loaded 2-core CI machine needs ~10).
func WithStartTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// Start runs a cluster for the test t and stops it in t.Cleanup. It skips
// (outside CI) or fails (in CI) when the binaries are missing, and fails
// when the cluster does not come up.
func Start(t testing.TB, opts ...Option) *Cluster {
	t.Helper()
	assets := testenv.KubeAssets(t)
	c, err := StartAssets(assets, opts...)
	if err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	t.Cleanup(c.Stop)
	return c
}

// StartAssets runs a cluster from the binaries in assets. The caller must
// call Stop. Start is the usual entry point; StartAssets serves callers
// without a testing.TB (benchmark mains, tools).
func StartAssets(assets string, opts ...Option) (*Cluster, error) {
	o := options{serviceCIDRs: DefaultServiceCIDRs, timeout: 90 * time.Second}
	for _, opt := range opts {
		opt(&o)
	}
	var err error
	// A port picked by freePorts can be taken before the child binds it;
	// a fresh set of ports almost always works the second time.
	for attempt := 0; attempt < 3; attempt++ {
		var c *Cluster
		c, err = start(assets, o)
		if err == nil {
			return c, nil
		}
		if !errors.Is(err, errExited) {
			return nil, err
		}
	}
	return nil, err
}

var errExited = errors.New("process exited")

func start(assets string, o options) (*Cluster, error) {
	base := ""
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		base = "/dev/shm"
	}
	if base == "" {
		base = os.TempDir()
	}
	sweepStale(base)
	dir, err := os.MkdirTemp(base, "kubetest-")
	if err != nil {
		return nil, err
	}
	if err := claim(dir); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	c := &Cluster{Dir: dir}
	ok := false
	defer func() {
		if !ok {
			c.Stop()
		}
	}()

	p, err := writePKI(dir)
	if err != nil {
		return nil, err
	}
	c.CAPEM = p.caPEM
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	c.EtcdURL = loopbackURL("http", ports[0])
	peerURL := loopbackURL("http", ports[1])
	c.URL = loopbackURL("https", ports[2])

	c.etcd, err = StartProcess("etcd", filepath.Join(assets, "etcd"), filepath.Join(dir, "etcd.log"), []string{
		"--name=default",
		"--data-dir=" + filepath.Join(dir, "etcd"),
		"--listen-client-urls=" + c.EtcdURL,
		"--advertise-client-urls=" + c.EtcdURL,
		"--listen-peer-urls=" + peerURL,
		"--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=default=" + peerURL,
		"--logger=zap",
		"--log-outputs=stderr",
	})
	if err != nil {
		return nil, err
	}

	authz := "AlwaysAllow"
	if o.rbac {
		authz = "Node,RBAC"
	}
	args := mergeArgs([]string{
		"--etcd-servers=" + c.EtcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(ports[2]),
		"--cert-dir=" + dir,
		"--tls-cert-file=" + p.servCert,
		"--tls-private-key-file=" + p.servKey,
		"--client-ca-file=" + p.caCert,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + p.saPub,
		"--service-account-signing-key-file=" + p.saKey,
		"--service-cluster-ip-range=" + strings.Join(o.serviceCIDRs, ","),
		"--authorization-mode=" + authz,
		"--allow-privileged=true",
		"--disable-admission-plugins=ServiceAccount",
		// Priority and fairness adds controllers and bookkeeping a test
		// cluster does not need; off, the apiserver is ready sooner.
		"--enable-priority-and-fairness=false",
		"--profiling=false",
		// A node (internal/testkit/nodetest) is reached at its InternalIP, never
		// by looking its name up in the machine's DNS.
		"--kubelet-preferred-address-types=InternalIP",
		"--v=1",
	}, o.args)
	c.apiserver, err = StartProcess("kube-apiserver", filepath.Join(assets, "kube-apiserver"),
		filepath.Join(dir, "kube-apiserver.log"), args)
	if err != nil {
		return nil, err
	}

	c.Config = &rest.Config{
		Host: c.URL,
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   p.caPEM,
			CertData: p.clientCPEM,
			KeyData:  p.clientKPEM,
		},
		// Tests create thousands of objects; client-go's default 5 QPS
		// would make that take minutes.
		QPS:   1000,
		Burst: 2000,
	}
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		return nil, err
	}
	c.Client = cs
	c.Kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := writeKubeconfig(c.Kubeconfig, c.URL, p); err != nil {
		return nil, err
	}
	if err := c.waitReady(o.timeout); err != nil {
		return nil, err
	}
	ok = true
	return c, nil
}

// mergeArgs returns defaults with every flag in extra replacing the
// default of the same name; extra flags without a default are appended.
func mergeArgs(defaults, extra []string) []string {
	name := func(a string) string {
		n, _, _ := strings.Cut(a, "=")
		return n
	}
	out := append([]string(nil), defaults...)
	for _, e := range extra {
		replaced := false
		for i, d := range out {
			if name(d) == name(e) {
				out[i] = e
				replaced = true
				break
			}
		}
		if !replaced {
			out = append(out, e)
		}
	}
	return out
}

// waitReady polls /readyz, then waits for the "default" namespace, which
// the apiserver's own bootstrap controller creates shortly after.
func (c *Cluster) waitReady(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	rc := c.Client.Discovery().RESTClient()
	var last error
	for {
		for _, p := range []*Process{c.etcd, c.apiserver} {
			if p.Exited() {
				return fmt.Errorf("%s: %w: %v\n%s", p.name, errExited, p.err, p.Tail(4000))
			}
		}
		var code int
		res := rc.Get().AbsPath("/readyz").Do(ctx).StatusCode(&code)
		last = res.Error()
		if last == nil && code == http.StatusOK {
			_, last = c.Client.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
			if last == nil {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kube-apiserver not ready after %v: %v\n%s", timeout, last, c.apiserver.Tail(4000))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Stop kills kube-apiserver, then etcd (each by its PID), and removes Dir.
// Safe to call more than once.
func (c *Cluster) Stop() {
	if c == nil || c.stopped {
		return
	}
	c.stopped = true
	c.apiserver.Stop(5 * time.Second)
	c.etcd.Stop(5 * time.Second)
	if c.Dir != "" {
		_ = os.RemoveAll(c.Dir)
	}
}

// APIServerPID is the kube-apiserver's process id, for a test that stops
// it (SIGSTOP: an API server that accepts connections and never answers)
// and resumes it.
func (c *Cluster) APIServerPID() int { return c.apiserver.Pid() }

// Logs returns the last bytes of the kube-apiserver and etcd logs, for a
// failure message.
func (c *Cluster) Logs() string {
	return "--- kube-apiserver ---\n" + c.apiserver.Tail(8000) + "\n--- etcd ---\n" + c.etcd.Tail(4000)
}

// Namespace creates a namespace named prefix-<random suffix> (and its
// "default" ServiceAccount, which no controller creates here) and deletes
// it in t.Cleanup.
func (c *Cluster) Namespace(t testing.TB, prefix string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	_, err = c.Client.CoreV1().ServiceAccounts(ns.Name).Create(ctx, &corev1.ServiceAccount{
		ObjectMeta: metav1.ObjectMeta{Name: "default"},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create default service account: %v", err)
	}
	t.Cleanup(func() {
		if c.stopped {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Client.CoreV1().Namespaces().Delete(ctx, ns.Name, metav1.DeleteOptions{})
	})
	return ns.Name
}

func writeKubeconfig(path, url string, p *pki) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["kubetest"] = &clientcmdapi.Cluster{Server: url, CertificateAuthorityData: p.caPEM}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: p.clientCPEM, ClientKeyData: p.clientKPEM}
	cfg.Contexts["kubetest"] = &clientcmdapi.Context{Cluster: "kubetest", AuthInfo: "admin", Namespace: "default"}
	cfg.CurrentContext = "kubetest"
	return clientcmd.WriteToFile(*cfg, path)
}
