package node

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/meshdns/meshdns/internal/testkit/kubetest"
	"github.com/meshdns/meshdns/internal/testkit/nodetest"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

// agentBuildFlags make the sidecar's binary (archtest.AgentMain) as the
// Makefile's AGENT_BUILD does (with CGO_ENABLED=0, which buildStatic sets).
var agentBuildFlags = []string{"-ldflags", "-s -w"}

// buildStatic builds a package of this module as a static binary, as the
// image would carry it, with the go build flags extra.
func buildStatic(t *testing.T, pkg, out string, extra ...string) {
	t.Helper()
	goTool := testenv.RequireTool(t, "go")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	args := append(append([]string{"build", "-trimpath"}, extra...), "-o", out, pkg)
	cmd := exec.CommandContext(ctx, goTool, args...)
	cmd.Dir = "../.."
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
}

// projectImage builds the project's image from the static binaries
// (meshdns and the sidecar's meshdns-agent) with hack/image (the command
// behind `make image`), named as the injection template refers to it, for
// this machine's platform; it returns the archive.
func projectImage(t *testing.T, meshdns, agent, dir string) string {
	t.Helper()
	goTool := testenv.RequireTool(t, "go")
	archive := filepath.Join(dir, "meshdns-image.tar")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goTool, "run", "./hack/image", "-name", "localhost/meshdns:test",
		"-binary", "linux/"+goruntime.GOARCH+"="+meshdns, "-agent-binary", "linux/"+goruntime.GOARCH+"="+agent, "-layout", filepath.Join(dir, "oci"), "-archive", archive, "-gzip=false")
	cmd.Dir = "../.."
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hack/image: %v\n%s", err, b)
	}
	return archive
}

// dnsStandIn is the cluster DNS the node's pods are configured with: it
// answers names under example.org and web.corp.example.com, NXDOMAIN for
// everything else, and records the questions it gets.
type dnsStandIn struct {
	mu   sync.Mutex
	seen map[string]int
	// more are names the test adds (answer), as a cluster DNS learns a
	// Service's name.
	more map[string]string
}

const (
	externalIP = "198.51.100.7" // TEST-NET-2: only the stand-in knows it
	// corpWebIP is a corporate host under the node's search domain, named
	// like the pods' service "web".
	corpWebIP = "203.0.113.80"
)

func startStandIn(t *testing.T) *dnsStandIn {
	t.Helper()
	s := &dnsStandIn{seen: map[string]int{}, more: map[string]string{}}
	h := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		q := r.Question[0]
		s.mu.Lock()
		s.seen[strings.ToLower(q.Name)]++
		more, known := s.more[strings.ToLower(q.Name)]
		s.mu.Unlock()
		name := strings.ToLower(q.Name)
		if known {
			if q.Qtype == dns.TypeA {
				rr, _ := dns.NewRR(q.Name + " 5 IN A " + more)
				m.Answer = append(m.Answer, rr)
			}
		} else if ip, ok := map[string]string{"web.corp.example.com.": corpWebIP}[name]; ok || dns.IsSubDomain("example.org.", name) {
			if !ok {
				ip = externalIP
			}
			if q.Qtype == dns.TypeA {
				rr, _ := dns.NewRR(q.Name + " 60 IN A " + ip)
				m.Answer = append(m.Answer, rr)
			}
		} else {
			m.Rcode = dns.RcodeNameError
		}
		_ = w.WriteMsg(m)
	})
	addr := net.JoinHostPort(nodetest.NodeIP.String(), "53")
	for _, network := range []string{"udp", "tcp"} {
		srv := &dns.Server{Addr: addr, Net: network, Handler: h}
		started := make(chan error, 1)
		srv.NotifyStartedFunc = func() { started <- nil }
		go func() { started <- srv.ListenAndServe() }()
		if err := <-started; err != nil {
			t.Fatalf("DNS stand-in %s %s: %v", network, addr, err)
		}
		t.Cleanup(func() { _ = srv.Shutdown() })
	}
	return s
}

// answer makes the stand-in answer the fully qualified name with ip.
func (s *dnsStandIn) answer(name, ip string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.more[strings.ToLower(name)] = ip
}

func (s *dnsStandIn) asked(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen[name]
}

// applyManifests creates the objects of the example manifests in files
// (relative to examples/kubernetes) that are namespaces, service accounts
// and RBAC; it returns the rest decoded, for the test to adapt.
func applyManifests(t *testing.T, c *kubetest.Cluster, files ...string) []runtime.Object {
	t.Helper()
	var rest []runtime.Object
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join("../../examples/kubernetes", f))
		if err != nil {
			t.Fatal(err)
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
		for {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatal(err)
			}
			if len(bytes.TrimSpace(doc)) == 0 {
				continue
			}
			obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if !createAccess(t, c, obj) {
				rest = append(rest, obj)
			}
		}
	}
	return rest
}

// createAccess creates obj when it is a namespace, service account or RBAC
// object and reports whether it was one.
func createAccess(t *testing.T, c *kubetest.Cluster, obj runtime.Object) bool {
	t.Helper()
	ctx := context.Background()
	var err error
	switch o := obj.(type) {
	case *corev1.Namespace:
		_, err = c.Client.CoreV1().Namespaces().Create(ctx, o, metav1.CreateOptions{})
	case *corev1.ServiceAccount:
		_, err = c.Client.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
	case *rbacv1.ClusterRole:
		_, err = c.Client.RbacV1().ClusterRoles().Create(ctx, o, metav1.CreateOptions{})
	case *rbacv1.ClusterRoleBinding:
		_, err = c.Client.RbacV1().ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{})
	case *rbacv1.Role:
		_, err = c.Client.RbacV1().Roles(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
	case *rbacv1.RoleBinding:
		_, err = c.Client.RbacV1().RoleBindings(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
	default:
		return false
	}
	if err != nil {
		t.Fatalf("create %T: %v", obj, err)
	}
	return true
}

// serviceAccountKubeconfig writes a kubeconfig that acts as the control
// plane's ServiceAccount (the admin certificate impersonating it), so the
// control plane process has exactly the RBAC of the manifests.
func serviceAccountKubeconfig(t *testing.T, c *kubetest.Cluster, dir, ns, sa string) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: c.URL, CertificateAuthorityData: c.CAPEM}
	cfg.AuthInfos["sa"] = &clientcmdapi.AuthInfo{
		ClientCertificateData: c.Config.CertData, ClientKeyData: c.Config.KeyData,
		Impersonate: "system:serviceaccount:" + ns + ":" + sa,
	}
	cfg.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "sa"}
	cfg.CurrentContext = "c"
	path := filepath.Join(dir, "controlplane.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// registerWebhook creates the example's MutatingWebhookConfiguration,
// pointed at the control plane process at url instead of its Service (no
// kube-proxy routes ClusterIPs here), with its empty caBundle.
func registerWebhook(t *testing.T, c *kubetest.Cluster, objs []runtime.Object, url string) {
	t.Helper()
	for _, obj := range objs {
		mwc, ok := obj.(*admissionv1.MutatingWebhookConfiguration)
		if !ok {
			continue
		}
		for i := range mwc.Webhooks {
			cc := &mwc.Webhooks[i].ClientConfig
			path := "/inject"
			if cc.Service != nil && cc.Service.Path != nil {
				path = *cc.Service.Path
			}
			u := url + path
			cc.Service, cc.URL = nil, &u
		}
		if _, err := c.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(context.Background(), mwc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatal("no MutatingWebhookConfiguration in the manifests")
}

func freePort(t *testing.T, host string) string {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
