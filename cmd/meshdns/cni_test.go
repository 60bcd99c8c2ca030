package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/pem"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/meshdns/meshdns/cni"
	"github.com/meshdns/meshdns/internal/testkit/kubetest"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

// cniNode is a real API server with the installer's ServiceAccount, its
// RBAC as the manifests grant it, its pod and that pod's projected token,
// and directories standing for the node's.
type cniNode struct {
	c                         *kubetest.Cluster
	bin, conf, tokens, before string
	pod                       *corev1.Pod
	list                      string // the node's configuration list
}

const cniNS = "meshdns-cni"

func newCNINode(t *testing.T) *cniNode {
	t.Helper()
	c := kubetest.Start(t, kubetest.WithRBAC())
	ctx := context.Background()
	cs := c.Client
	objs := []func() error{
		func() error {
			_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: cniNS}}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := cs.CoreV1().ServiceAccounts(cniNS).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "meshdns-cni"}}, metav1.CreateOptions{})
			return err
		},
		func() error { return createCNIRBAC(ctx, cs) },
	}
	for _, f := range objs {
		if err := f(); err != nil {
			t.Fatal(err)
		}
	}
	d := t.TempDir()
	n := &cniNode{c: c, bin: filepath.Join(d, "bin"), conf: filepath.Join(d, "net.d"), tokens: filepath.Join(d, "sa")}
	for _, dir := range []string{n.bin, n.conf, n.tokens} {
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	n.list = filepath.Join(n.conf, "10-net.conflist")
	n.before = "{\"cniVersion\":\"1.0.0\",\"name\":\"net\",\n \"plugins\":[{\"type\":\"bridge\"}]}\n"
	if err := os.WriteFile(n.list, []byte(n.before), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(n.tokens, "ca.crt"), c.CAPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	n.startInstallerPod(t)
	return n
}

// createCNIRBAC grants the installer's ServiceAccount what
// examples/kubernetes/cni/60-cni.yaml grants it.
func createCNIRBAC(ctx context.Context, cs kubernetes.Interface) error {
	sa := []rbacv1.Subject{{Kind: "ServiceAccount", Name: "meshdns-cni", Namespace: cniNS}}
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "meshdns-cni"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}}}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "meshdns-cni"},
		RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "meshdns-cni"}, Subjects: sa}, metav1.CreateOptions{}); err != nil {
		return err
	}
	if _, err := cs.RbacV1().Roles(cniNS).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "meshdns-cni"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"serviceaccounts/token"}, ResourceNames: []string{"meshdns-cni"}, Verbs: []string{"create"}},
			{APIGroups: []string{"apps"}, Resources: []string{"daemonsets"}, ResourceNames: []string{"meshdns-cni"}, Verbs: []string{"get"}},
		}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	_, err := cs.RbacV1().RoleBindings(cniNS).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "meshdns-cni"},
		RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "meshdns-cni"}, Subjects: sa}, metav1.CreateOptions{})
	return err
}

// startInstallerPod creates the installer's pod and writes its projected
// token, bound to the pod as the kubelet's is.
func (n *cniNode) startInstallerPod(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	pod, err := n.c.Client.CoreV1().Pods(cniNS).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "meshdns-cni-"},
		Spec:       corev1.PodSpec{ServiceAccountName: "meshdns-cni", Containers: []corev1.Container{{Name: "install", Image: "meshdns"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := n.c.Client.CoreV1().ServiceAccounts(cniNS).CreateToken(ctx, "meshdns-cni", &authv1.TokenRequest{Spec: authv1.TokenRequestSpec{
		BoundObjectRef: &authv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(n.tokens, "token"), []byte(tr.Status.Token), 0o600); err != nil {
		t.Fatal(err)
	}
	n.pod = pod
}

// run runs `meshdns cni args...` as the installer's container would.
func (n *cniNode) run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return n.runCtx(context.Background(), args...)
}

func (n *cniNode) runCtx(ctx context.Context, args ...string) (string, error) {
	var out, errOut bytes.Buffer
	err := runCNI(ctx, append(args, "--bin-dir", n.bin, "--conf-dir", n.conf, "--host-conf-dir", n.conf,
		"--token-dir", n.tokens, "--kube-server", n.c.URL, "--namespace", cniNS), &out, &errOut)
	return errOut.String(), err
}

// plugin runs the installed plugin's ADD for pod namespace/name, with the
// configuration list the runtime would read; it returns the exit status
// and stdout.
func (n *cniNode) plugin(t *testing.T, namespace, name string) (int, string) {
	t.Helper()
	var list struct {
		CNIVersion string            `json:"cniVersion"`
		Name       string            `json:"name"`
		Plugins    []json.RawMessage `json:"plugins"`
	}
	data, err := os.ReadFile(n.list)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &list); err != nil {
		t.Fatal(err)
	}
	var entry map[string]any
	for _, p := range list.Plugins {
		var m map[string]any
		_ = json.Unmarshal(p, &m)
		if m["type"] == cni.PluginType {
			entry = m
		}
	}
	if entry == nil {
		t.Fatalf("no meshdns-cni entry in %s", data)
	}
	entry["cniVersion"], entry["name"] = list.CNIVersion, list.Name
	entry["prevResult"] = json.RawMessage(`{"cniVersion":"1.0.0","ips":[{"address":"10.244.0.9/24"}]}`)
	stdin, _ := json.Marshal(entry)
	env := map[string]string{"CNI_COMMAND": "ADD", "CNI_NETNS": "/run/netns/none", "CNI_CONTAINERID": "c",
		"CNI_ARGS": "IgnoreUnknown=1;K8S_POD_NAMESPACE=" + namespace + ";K8S_POD_NAME=" + name}
	var out, errOut bytes.Buffer
	code := runCNIPlugin(context.Background(), func(k string) string { return env[k] }, bytes.NewReader(stdin), &out, &errOut)
	return code, out.String()
}

// TestCNICredentialOutlivesInstaller: the plugin's token is its own, not
// the installer pod's, so deleting that pod (a rollout, an eviction, a
// deleted DaemonSet) leaves pods starting on the node; the projected token
// it was made with is refused from then on, as the old kubeconfig was.
func TestCNICredentialOutlivesInstaller(t *testing.T) {
	n := newCNINode(t)
	ctx := context.Background()
	plain := n.c.Namespace(t, "plain")
	if _, err := n.c.Client.CoreV1().Pods(plain).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "app"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if log, err := n.run(t, "install", "--once", "--disable-ipv6"); err != nil {
		t.Fatalf("install: %v\n%s", err, log)
	}
	if _, err := os.Stat(filepath.Join(n.bin, cni.PluginType)); err != nil {
		t.Error(err)
	}
	kc, err := clientcmd.LoadFromFile(filepath.Join(n.conf, cni.KubeconfigName))
	if err != nil {
		t.Fatal(err)
	}
	projected, _ := os.ReadFile(filepath.Join(n.tokens, "token"))
	cur := kc.Contexts[kc.CurrentContext]
	if cur == nil || kc.Clusters[cur.Cluster].Server != n.c.URL || kc.AuthInfos[cur.AuthInfo].Token == string(projected) {
		t.Fatalf("kubeconfig: %+v, want the API server and a token of the plugin's own", kc)
	}
	list, _ := os.ReadFile(n.list)
	for _, want := range []string{`"type": "meshdns-cni"`, `"disableIPv6": true`, `"excludeNamespaces": [`, `"meshdns-system"`, `"meshdns-cni"`} {
		if !strings.Contains(string(list), want) {
			t.Errorf("configuration list lacks %s:\n%s", want, list)
		}
	}
	if code, out := n.plugin(t, plain, "app"); code != 0 {
		t.Fatalf("plugin with the installer running: exit %d: %s", code, out)
	}

	if err := n.c.Client.CoreV1().Pods(cniNS).Delete(ctx, n.pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The installer pod's own token is refused once the pod is gone...
	bound := rest.AnonymousClientConfig(n.c.Config)
	bound.BearerToken = string(projected)
	bcs := kubernetes.NewForConfigOrDie(bound)
	// (the API server learns of the deletion through its pod informer)
	testenv.Eventually(t, "the deleted pod's token refused", time.Minute, func() bool {
		_, err := bcs.CoreV1().Pods(plain).Get(ctx, "app", metav1.GetOptions{})
		return apierrors.IsUnauthorized(err)
	})
	// ...and the plugin's is not: pods go on starting.
	if code, out := n.plugin(t, plain, "app"); code != 0 {
		t.Fatalf("plugin after the installer pod was deleted: exit %d: %s", code, out)
	}
	if code, out := n.plugin(t, "kube-system", "kube-proxy-x"); code != 0 {
		t.Fatalf("kube-system: exit %d: %s", code, out)
	}
}

// TestCNIStaleCredential: a kubeconfig the API server refuses fails an
// uninjected pod's sandbox with an error that names the installer (the
// kubelet makes it the pod's FailedCreatePodSandBox event), the installer
// reports it in its log and renews the token; kube-system is never asked.
func TestCNIStaleCredential(t *testing.T) {
	n := newCNINode(t)
	if log, err := n.run(t, "install", "--once"); err != nil {
		t.Fatalf("install: %v\n%s", err, log)
	}
	kcPath := filepath.Join(n.conf, cni.KubeconfigName)
	stale, err := pluginKubeconfig(n.c.URL, n.c.CAPEM, "not-a-token")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(kcPath, stale, 0o600); err != nil {
		t.Fatal(err)
	}
	code, out := n.plugin(t, "plain", "app")
	if code == 0 || !strings.Contains(out, "rejected the plugin's credential") || !strings.Contains(out, "DaemonSet pod running on this node") {
		t.Errorf("plugin with a stale credential: exit %d: %s", code, out)
	}
	if code, out := n.plugin(t, "kube-system", "etcd-node1"); code != 0 {
		t.Errorf("kube-system with a stale credential: exit %d: %s", code, out)
	}

	var logs bytes.Buffer
	cred := &cniCredential{server: n.c.URL, tokenDir: n.tokens, namespace: cniNS, account: "meshdns-cni", lifetime: time.Hour,
		log: slog.New(slog.NewTextHandler(&logs, nil)), now: time.Now, token: "not-a-token", renewAt: time.Now().Add(time.Hour)}
	cred.check(context.Background(), kcPath)
	if !cred.broken || !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), "rejects the plugin's credential") {
		t.Fatalf("check of a stale credential: broken %v, log %s", cred.broken, logs.String())
	}
	fresh, err := cred.kubeconfig(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(kcPath, fresh, 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out := n.plugin(t, "plain", "app"); code != 0 {
		t.Errorf("plugin after the renewal: exit %d: %s", code, out)
	}
}

// TestCNIUninstall: the preStop hook keeps the plugin while its DaemonSet
// is there (a restart or a rollout) and removes it once the DaemonSet is
// gone; the node's configuration list is then as before install, byte for
// byte. `meshdns cni uninstall` removes it unconditionally.
func TestCNIUninstall(t *testing.T) {
	n := newCNINode(t)
	ctx := context.Background()
	if log, err := n.run(t, "install", "--once"); err != nil {
		t.Fatalf("install: %v\n%s", err, log)
	}
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "meshdns-cni"}, Spec: appsv1.DaemonSetSpec{
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "cni"}},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "cni"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "install", Image: "meshdns"}}}}}}
	if _, err := n.c.Client.AppsV1().DaemonSets(cniNS).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if log, err := n.run(t, "uninstall", "--if-daemonset-gone"); err != nil || !strings.Contains(log, "stays installed") {
		t.Fatalf("preStop with the DaemonSet there: %v\n%s", err, log)
	}
	if b, _ := os.ReadFile(n.list); !strings.Contains(string(b), cni.PluginType) {
		t.Fatalf("the plugin was removed while its DaemonSet is there:\n%s", b)
	}
	if err := n.c.Client.AppsV1().DaemonSets(cniNS).Delete(ctx, ds.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if log, err := n.run(t, "uninstall", "--if-daemonset-gone"); err != nil || !strings.Contains(log, "meshdns-cni uninstalled") {
		t.Fatalf("preStop with the DaemonSet gone: %v\n%s", err, log)
	}
	n.assertUninstalled(t)

	// The installer stopped (SIGTERM, after the preStop hook) makes the
	// same decision: a round between the hook and the signal may have
	// installed the plugin again.
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan string)
	go func() {
		log, _ := n.runCtx(ctx, "install", "--interval", "1h")
		done <- log
	}()
	testenv.Eventually(t, "the installer's first round", time.Minute, func() bool {
		b, _ := os.ReadFile(n.list)
		return strings.Contains(string(b), cni.PluginType)
	})
	cancel()
	if log := <-done; !strings.Contains(log, "meshdns-cni uninstalled") {
		t.Errorf("installer stopped with its DaemonSet gone:\n%s", log)
	}
	n.assertUninstalled(t)
	ctx = context.Background()

	// By hand, with no API server to ask.
	if log, err := n.run(t, "install", "--once"); err != nil {
		t.Fatalf("install: %v\n%s", err, log)
	}
	var errOut bytes.Buffer
	if err := runCNI(ctx, []string{"uninstall", "--bin-dir", n.bin, "--conf-dir", n.conf}, io.Discard, &errOut); err != nil {
		t.Fatalf("uninstall: %v\n%s", err, errOut.String())
	}
	n.assertUninstalled(t)
}

func (n *cniNode) assertUninstalled(t *testing.T) {
	t.Helper()
	if b, _ := os.ReadFile(n.list); string(b) != n.before {
		t.Errorf("configuration list after uninstall:\n%s\nwant, byte for byte:\n%s", b, n.before)
	}
	ents, _ := os.ReadDir(n.conf)
	if len(ents) != 1 {
		t.Errorf("configuration directory after uninstall: %v, want the list alone", ents)
	}
	if _, err := os.Stat(filepath.Join(n.bin, cni.PluginType)); !os.IsNotExist(err) {
		t.Errorf("plugin binary after uninstall: %v", err)
	}
}

func TestCNIFlagErrors(t *testing.T) {
	for _, tt := range []struct {
		name    string
		args    []string
		wantErr string
	}{
		{name: "no API server", args: []string{"install", "--once"}, wantErr: "KUBERNETES_SERVICE_HOST"},
		{name: "short token lifetime", args: []string{"install", "--once", "--kube-server", "https://x", "--token-lifetime", "1m"}, wantErr: "minimum is 10m"},
		{name: "unknown action", args: []string{"frob"}, wantErr: "want install or uninstall"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("KUBERNETES_SERVICE_HOST", "")
			err := runCNI(context.Background(), tt.args, io.Discard, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error %v, want %q", err, tt.wantErr)
			}
		})
	}
}

// TestCNIPlugin speaks the CNI protocol to the binary's plugin mode, with a
// real HTTPS server for the API server.
func TestCNIPlugin(t *testing.T) {
	status := http.StatusOK
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/namespaces/demo/pods/app" || r.Header.Get("Authorization") != "Bearer tok" {
			http.Error(w, "unexpected "+r.URL.Path, http.StatusBadRequest)
			return
		}
		w.WriteHeader(status)
		_, _ = w.Write([]byte(`{"metadata":{"name":"app","annotations":{"other":"x"}}}`))
	}))
	t.Cleanup(srv.Close)
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := clientcmdapi.NewConfig()
	// client-go sends a token over TLS only, as the plugin's kubeconfig
	// does.
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: srv.URL, CertificateAuthorityData: ca}
	cfg.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: "tok"}
	cfg.Contexts["x"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	cfg.CurrentContext = "x"
	if err := clientcmd.WriteToFile(*cfg, kc); err != nil {
		t.Fatal(err)
	}
	prev := `{"cniVersion":"1.0.0","ips":[{"address":"10.244.0.9/24"}]}`
	stdin := `{"cniVersion":"1.0.0","name":"k8s","type":"meshdns-cni","kubeconfig":"` + kc + `","prevResult":` + prev + `}`
	env := map[string]string{"CNI_COMMAND": "ADD", "CNI_NETNS": "/run/netns/none", "CNI_CONTAINERID": "c",
		"CNI_ARGS": "IgnoreUnknown=1;K8S_POD_NAMESPACE=demo;K8S_POD_NAME=app"}
	run := func() (int, string) {
		var out, errOut bytes.Buffer
		code := runCNIPlugin(context.Background(), func(k string) string { return env[k] }, strings.NewReader(stdin), &out, &errOut)
		return code, out.String()
	}

	// A pod without the annotation: its result passes through.
	if code, out := run(); code != 0 || out != prev {
		t.Errorf("pass-through: exit %d, stdout %q", code, out)
	}
	// The API server failing fails the sandbox with a CNI error.
	status = http.StatusInternalServerError
	code, out := run()
	var cniErr struct {
		Code int    `json:"code"`
		Msg  string `json:"msg"`
	}
	if err := json.Unmarshal([]byte(out), &cniErr); err != nil || code != 1 || cniErr.Code != 999 || !strings.Contains(cniErr.Msg, "demo/app") {
		t.Errorf("API failure: exit %d, stdout %q", code, out)
	}
	// VERSION needs no configuration.
	env = map[string]string{"CNI_COMMAND": "VERSION"}
	if code, out := run(); code != 0 || !strings.Contains(out, `"supportedVersions"`) {
		t.Errorf("VERSION: exit %d, stdout %q", code, out)
	}
}
