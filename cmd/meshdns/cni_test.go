//go:build !agentonly

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/meshdns/meshdns/cni"
)

// TestCNIInstallOnce runs the installer against directories standing for
// the node's, and reads back what the runtime and the plugin would.
func TestCNIInstallOnce(t *testing.T) {
	d := t.TempDir()
	bin, conf, tokens := filepath.Join(d, "bin"), filepath.Join(d, "net.d"), filepath.Join(d, "sa")
	for _, dir := range []string{bin, conf, tokens} {
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{
		filepath.Join(conf, "10-net.conflist"): `{"cniVersion":"1.0.0","name":"net","plugins":[{"type":"bridge"}]}`,
		filepath.Join(tokens, "token"):         "the-token",
		filepath.Join(tokens, "ca.crt"):        "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
	}
	for p, body := range files {
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var out, errOut bytes.Buffer
	err := runCNI(context.Background(), []string{"install", "--once", "--bin-dir", bin, "--conf-dir", conf,
		"--host-conf-dir", "/etc/cni/net.d", "--token-dir", tokens, "--kube-server", "https://10.0.0.1:6443", "--disable-ipv6"}, &out, &errOut)
	if err != nil {
		t.Fatalf("install: %v\n%s", err, errOut.String())
	}
	if _, err := os.Stat(filepath.Join(bin, cni.PluginType)); err != nil {
		t.Error(err)
	}
	kc, err := clientcmd.LoadFromFile(filepath.Join(conf, cni.KubeconfigName))
	if err != nil {
		t.Fatal(err)
	}
	cur := kc.Contexts[kc.CurrentContext]
	if cur == nil || kc.Clusters[cur.Cluster].Server != "https://10.0.0.1:6443" || kc.AuthInfos[cur.AuthInfo].Token != "the-token" {
		t.Errorf("kubeconfig: %+v", kc)
	}
	list, _ := os.ReadFile(filepath.Join(conf, "10-net.conflist"))
	for _, want := range []string{`"type": "meshdns-cni"`, `"kubeconfig": "/etc/cni/net.d/meshdns-cni.kubeconfig"`, `"disableIPv6": true`} {
		if !strings.Contains(string(list), want) {
			t.Errorf("configuration list lacks %s:\n%s", want, list)
		}
	}

	if err := runCNI(context.Background(), []string{"install", "--once", "--conf-dir", conf, "--token-dir", tokens}, &out, &errOut); err == nil ||
		!strings.Contains(err.Error(), "KUBERNETES_SERVICE_HOST") {
		t.Errorf("no API server: %v", err)
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
