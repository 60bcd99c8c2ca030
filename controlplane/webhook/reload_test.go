package webhook

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/meshdns/meshdns/internal/testkit/certtest"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
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
		{name: "port clash", in: "dnsPort: 15020\n", wantErr: "must differ"},
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

func TestNewRejectsBadTemplate(t *testing.T) {
	if _, err := New(Config{Template: Template{AdminPort: 15053}}); err == nil {
		t.Fatal("New accepted a template whose admin port is the DNS port")
	}
}

// TestWatchTemplate is the path the control plane uses: it serves the
// Webhook as a handler with its own TLS and runs WatchTemplate beside it.
func TestWatchTemplate(t *testing.T) {
	dir := t.TempDir()
	// A ConfigMap volume: the file never changes, its ..data link does.
	testenv.UpdateConfigMapVolume(t, dir, map[string]string{"template.yaml": "image: example/meshdns:a\n"})
	tmplFile := filepath.Join(dir, "template.yaml")
	w, _ := newTestWebhook(t, Config{TemplateFile: tmplFile, PollInterval: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.WatchTemplate(ctx) }()
	eventually(t, "template a", func() bool { return w.Template().Image == "example/meshdns:a" })
	testenv.UpdateConfigMapVolume(t, dir, map[string]string{"template.yaml": "image: example/meshdns:b\n"})
	eventually(t, "template b", func() bool { return w.Template().Image == "example/meshdns:b" })
	resp := decodeResponse(t, post(t, w, "/inject", reviewBody(t, &corev1.Pod{})))
	if !strings.Contains(string(resp.Patch), `"image":"example/meshdns:b"`) {
		t.Errorf("patch does not use the reloaded template: %s", resp.Patch)
	}
	testenv.UpdateConfigMapVolume(t, dir, map[string]string{"template.yaml": "imgae: typo\n"})
	eventually(t, "bad template counted", func() bool {
		return testutil.ToFloat64(w.metrics.reloads.WithLabelValues("error")) >= 1
	})
	if got := w.Template().Image; got != "example/meshdns:b" {
		t.Errorf("image = %q after a bad template, want b kept", got)
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
