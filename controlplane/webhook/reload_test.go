package webhook

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/meshdns/meshdns/internal/certtest"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
)

func TestParseTemplate(t *testing.T) {
	base := DefaultTemplate()
	tests := []struct {
		name    string
		in      string
		check   func(Template) string
		wantErr string
	}{
		{
			name:  "empty file is the base",
			in:    "",
			check: func(got Template) string { return cmp.Diff(base.Image, got.Image) },
		},
		{
			name: "yaml overrides image and ports",
			in:   "image: example/meshdns:v2\ndnsPort: 5353\nadminPort: 9000\n",
			check: func(got Template) string {
				return cmp.Diff([]any{"example/meshdns:v2", int32(5353), int32(9000), base.ControlPlane},
					[]any{got.Image, got.DNSPort, got.AdminPort, got.ControlPlane})
			},
		},
		{
			name: "json works too",
			in:   `{"proxyUID": 4000, "agentResources": {"requests": {"cpu": "50m"}}}`,
			check: func(got Template) string {
				return cmp.Diff([]any{int64(4000), int64(1337), "50m", true},
					[]any{got.ProxyUID, got.ProxyGID, got.AgentResources.Requests.Cpu().String(), got.AgentResources.Limits == nil})
			},
		},
		{name: "typo is an error", in: "imgae: x\n", wantErr: `unknown field "imgae"`},
		{name: "port clash", in: "dnsPort: 15020\n", wantErr: "dnsPort and adminPort are both 15020"},
		{name: "relative state dir", in: "stateDir: run\n", wantErr: `stateDir "run" is not absolute`},
		{name: "negative uid", in: "proxyUID: -1\n", wantErr: "must be positive"},
		{name: "not yaml", in: "image: [\n", wantErr: "parse template"},
		{name: "uid beyond int32", in: "proxyUID: 2147483648\n", wantErr: "must be positive"},
		{name: "image with space", in: "image: \"a b\"\n", wantErr: "contains white space"},
		{name: "zero state size", in: "stateSizeLimit: \"0\"\n", wantErr: "stateSizeLimit 0 must be positive"},
		{name: "negative request", in: "agentResources: {requests: {cpu: -1m}}\n", wantErr: "agentResources: request cpu -1m is negative"},
		{name: "request above limit", in: "initResources: {requests: {memory: 2Gi}, limits: {memory: 1Gi}}\n", wantErr: "initResources: request memory 2Gi is above the limit 1Gi"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseTemplate([]byte(tt.in), base)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := tt.check(got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// serveTest starts w.Serve on 127.0.0.1:0 and returns its address.
func serveTest(t *testing.T, w *Webhook) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return ln.Addr().String()
}

// servedSerial does a TLS handshake and returns the leaf's serial number.
func servedSerial(t *testing.T, addr string) int64 {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true}) // the serial is what we check
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
}

// TestServeReloads runs the real HTTPS server and rotates the certificate
// and the template files under it.
func TestServeReloads(t *testing.T) {
	dir := t.TempDir()
	ca := certtest.NewCA(t, "meshdns-webhook-test-ca")
	certPEM, keyPEM := ca.Issue(t, "meshdns-webhook-test", true, certtest.Serial(1))
	certFile, keyFile := certtest.WritePair(t, dir, certPEM, keyPEM)
	tmplFile := certtest.Write(t, dir, "template.yaml", []byte("image: example/meshdns:v1\n"))
	w, _ := newTestWebhook(t, Config{
		CertFile: certFile, KeyFile: keyFile, TemplateFile: tmplFile,
		PollInterval: time.Hour, // only fsnotify may trigger the reloads below
	})
	addr := serveTest(t, w)

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.PEM)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 5 * time.Second}
	t.Cleanup(client.CloseIdleConnections)
	res, err := client.Post("https://"+addr+"/inject", "application/json", strings.NewReader(string(reviewBody(t, &corev1.Pod{}))))
	if err != nil {
		t.Fatalf("verified HTTPS request: %v", err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("status %d", res.StatusCode)
	}
	if got := w.Template().Image; got != "example/meshdns:v1" {
		t.Fatalf("image = %q, template file not loaded", got)
	}

	t.Run("template change is picked up", func(t *testing.T) {
		certtest.Write(t, dir, "template.yaml", []byte("image: example/meshdns:v2\n"))
		eventually(t, "template v2", func() bool { return w.Template().Image == "example/meshdns:v2" })
	})
	t.Run("bad template keeps the last good one", func(t *testing.T) {
		certtest.Write(t, dir, "template.yaml", []byte("imgae: typo\n"))
		eventually(t, "error counted", func() bool {
			return testutil.ToFloat64(w.metrics.reloads.WithLabelValues("template", "error")) >= 1
		})
		if got := w.Template().Image; got != "example/meshdns:v2" {
			t.Errorf("image = %q after a bad template, want v2 kept", got)
		}
	})
	t.Run("certificate rotation is picked up", func(t *testing.T) {
		if got := servedSerial(t, addr); got != 1 {
			t.Fatalf("serial = %d, want 1", got)
		}
		certPEM, keyPEM := ca.Issue(t, "meshdns-webhook-test", true, certtest.Serial(2))
		certtest.WritePair(t, dir, certPEM, keyPEM)
		eventually(t, "certificate 2 served", func() bool { return servedSerial(t, addr) == 2 })
	})
	t.Run("mismatched pair keeps the last good certificate", func(t *testing.T) {
		_, keyPEM := ca.Issue(t, "meshdns-webhook-test", true, certtest.Serial(3))
		certtest.Write(t, dir, "tls.key", keyPEM) // key of 3, certificate of 2
		eventually(t, "error counted", func() bool {
			return testutil.ToFloat64(w.metrics.reloads.WithLabelValues("certificate", "error")) >= 1
		})
		if got := servedSerial(t, addr); got != 2 {
			t.Errorf("serial = %d, want 2 kept", got)
		}
	})
}

func TestServeRefusesMissingFiles(t *testing.T) {
	dir := t.TempDir()
	certPEM, keyPEM := certtest.NewCA(t, "meshdns-webhook-test-ca").Issue(t, "meshdns-webhook-test", true)
	certFile, keyFile := certtest.WritePair(t, dir, certPEM, keyPEM)
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("dnsPort: -3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		cfg     Config
		wantErr string
	}{
		{name: "no certificate configured", cfg: Config{}, wantErr: "certificate and key files are required"},
		{name: "certificate missing", cfg: Config{CertFile: filepath.Join(dir, "nope"), KeyFile: keyFile}, wantErr: "read certificate"},
		{name: "bad template", cfg: Config{CertFile: certFile, KeyFile: keyFile, TemplateFile: bad}, wantErr: "dnsPort -3 out of range"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, _ := newTestWebhook(t, tt.cfg)
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			err = w.Serve(context.Background(), ln)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Serve err = %v, want %q", err, tt.wantErr)
			}
		})
	}
}

func TestNewRejectsBadTemplate(t *testing.T) {
	if _, err := New(Config{Template: Template{AdminPort: 15053}}); err == nil {
		t.Fatal("New accepted a template whose admin port is the DNS port")
	}
}

// TestWatchTemplate is the path the control plane uses: it serves the
// Webhook as a handler with its own TLS and runs WatchTemplate beside it.
func TestWatchTemplate(t *testing.T) {
	dir := t.TempDir()
	vol := configMapVolume{t: t, dir: dir}
	tmplFile := vol.update("template.yaml", "image: example/meshdns:a\n")
	w, _ := newTestWebhook(t, Config{TemplateFile: tmplFile, PollInterval: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.WatchTemplate(ctx) }()
	eventually(t, "template a", func() bool { return w.Template().Image == "example/meshdns:a" })
	vol.update("template.yaml", "image: example/meshdns:b\n")
	eventually(t, "template b", func() bool { return w.Template().Image == "example/meshdns:b" })
	resp := decodeResponse(t, post(t, w, "/inject", reviewBody(t, &corev1.Pod{})))
	if !strings.Contains(string(resp.Patch), `"image":"example/meshdns:b"`) {
		t.Errorf("patch does not use the reloaded template: %s", resp.Patch)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	bad := certtest.Write(t, dir, "bad.yaml", []byte("nope: 1\n"))
	w2, _ := newTestWebhook(t, Config{TemplateFile: bad})
	if err := w2.WatchTemplate(context.Background()); err == nil || !strings.Contains(err.Error(), "unknown field") {
		t.Fatalf("WatchTemplate with a bad file: %v", err)
	}
}

// configMapVolume lays files out the way the kubelet does in a ConfigMap
// volume: name -> ..data/name, ..data -> ..<version>, and an update swaps
// the ..data symlink by rename. The file itself never changes: a watch on
// it would miss the update.
type configMapVolume struct {
	t   *testing.T
	dir string
	n   int
}

func (v *configMapVolume) update(name, content string) string {
	v.t.Helper()
	v.n++
	version := fmt.Sprintf("..2026_11_22_%d", v.n)
	if err := os.Mkdir(filepath.Join(v.dir, version), 0o755); err != nil {
		v.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(v.dir, version, name), []byte(content), 0o644); err != nil {
		v.t.Fatal(err)
	}
	tmp := filepath.Join(v.dir, "..data_tmp")
	if err := os.Symlink(version, tmp); err != nil {
		v.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(v.dir, "..data")); err != nil {
		v.t.Fatal(err)
	}
	path := filepath.Join(v.dir, name)
	if _, err := os.Lstat(path); os.IsNotExist(err) {
		if err := os.Symlink(filepath.Join("..data", name), path); err != nil {
			v.t.Fatal(err)
		}
	}
	return path
}
