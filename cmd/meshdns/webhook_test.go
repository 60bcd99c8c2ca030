package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshdns/meshdns/cmd/internal/cli"
	"github.com/meshdns/meshdns/internal/testkit/certtest"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

// TestControlPlaneServesWebhook runs `meshdns controlplane` with the
// webhook flags on free loopback ports and sends it an AdmissionReview over
// verified HTTPS: the patch must use the template file, a template change
// must show in the next patch, and the webhook's metrics must be on the
// admin port.
func TestControlPlaneServesWebhook(t *testing.T) {
	dir := t.TempDir()
	ca := certtest.NewCA(t, "webhook-test-ca")
	certPEM, keyPEM := ca.Issue(t, "webhook-test", true, certtest.Serial(1))
	certFile, keyFile := certtest.WritePair(t, dir, certPEM, keyPEM)
	tmpl := filepath.Join(dir, "template.yaml")
	if err := os.WriteFile(tmpl, []byte("image: example/meshdns:one\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	grpcAddr, adminAddr, webhookAddr := testenv.FreeAddr(t), testenv.FreeAddr(t), testenv.FreeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- cli.Dispatch(ctx, []string{"controlplane", "--insecure-allow-unauthenticated", "--entries", "../../examples/entries",
			"--grpc-addr", grpcAddr, "--admin-addr", adminAddr, "--webhook-addr", webhookAddr,
			"--webhook-cert", certFile, "--webhook-key", keyFile,
			"--inject-template", tmpl, "--log-level", "error"}, io.Discard, io.Discard)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("controlplane: %v", err)
		}
	})
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.PEM)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	t.Cleanup(client.CloseIdleConnections)
	review := []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u1",` +
		`"resource":{"version":"v1","resource":"pods"},"operation":"CREATE","namespace":"demo",` +
		`"object":{"spec":{"containers":[{"name":"app","image":"app"}]}}}}`)
	patch := func() (string, error) {
		res, err := client.Post("https://"+webhookAddr+"/inject", "application/json", bytes.NewReader(review))
		if err != nil {
			return "", err
		}
		defer res.Body.Close()
		var out struct {
			Response struct {
				Allowed bool   `json:"allowed"`
				Patch   []byte `json:"patch"`
			} `json:"response"`
		}
		if err := json.NewDecoder(res.Body).Decode(&out); err != nil {
			return "", err
		}
		return string(out.Response.Patch), nil
	}
	var got string
	waitFor(t, "webhook serving", func() bool {
		p, err := patch()
		got = p
		return err == nil
	})
	if !strings.Contains(got, `"image":"example/meshdns:one"`) {
		t.Fatalf("patch does not use the template file: %s", got)
	}
	if err := os.WriteFile(tmpl, []byte("image: example/meshdns:two\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "template change in the patch", func() bool {
		p, err := patch()
		return err == nil && strings.Contains(p, `"image":"example/meshdns:two"`)
	})
	// Certificate rotation: the next handshakes get the new certificate,
	// without a restart.
	servedSerial := func() int64 {
		conn, err := tls.Dial("tcp", webhookAddr, &tls.Config{InsecureSkipVerify: true}) // only the serial is read
		if err != nil {
			return 0
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
	}
	if got := servedSerial(); got != 1 {
		t.Fatalf("served certificate serial %d, want 1", got)
	}
	certPEM, keyPEM = ca.Issue(t, "webhook-test", true, certtest.Serial(2))
	certtest.WritePair(t, dir, certPEM, keyPEM)
	waitFor(t, "rotated certificate served", func() bool { return servedSerial() == 2 })

	// A client that sends its headers and then trickles (or holds back)
	// the body is cut off by the server's read timeout rather than held
	// for as long as it likes.
	t.Run("slow body is cut off", func(t *testing.T) {
		conn, err := tls.Dial("tcp", webhookAddr, &tls.Config{RootCAs: pool})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := io.WriteString(conn, "POST /inject HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"); err != nil {
			t.Fatal(err)
		}
		// Far longer than the server's 15 s: only a server without a
		// read timeout reaches it.
		if err := conn.SetReadDeadline(time.Now().Add(2 * time.Minute)); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		_, err = io.ReadAll(conn)
		if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
			t.Fatalf("the server held a slow request for %v", time.Since(start))
		}
	})

	res, err := http.Get("http://" + adminAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if !strings.Contains(string(body), `meshdns_webhook_requests_total{outcome="injected"}`) {
		t.Errorf("admin /metrics lacks the webhook's metrics")
	}
}

func TestWebhookFlagErrors(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{name: "key without cert", args: []string{"--webhook-key", "k"}, wantErr: "go together"},
		{name: "template without webhook", args: []string{"--inject-template", "t.yaml"}, wantErr: "need --webhook-secret or --webhook-cert"},
		{name: "secret and cert", args: []string{"--webhook-secret", "ns/s", "--webhook-cert", "c", "--webhook-key", "k"}, wantErr: "exclude each other"},
		{name: "secret without namespace", args: []string{"--webhook-secret", "s"}, wantErr: "want NAMESPACE/NAME"},
		{name: "missing template file", args: []string{"--webhook-cert", "c", "--webhook-key", "k", "--inject-template", "/nonexistent/t.yaml"}, wantErr: "--inject-template /nonexistent/t.yaml: no such file or directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			args := append([]string{"controlplane", "--insecure-allow-unauthenticated", "--entries", "../../examples/entries", "--grpc-addr", testenv.FreeAddr(t),
				"--admin-addr", testenv.FreeAddr(t), "--webhook-addr", testenv.FreeAddr(t), "--log-level", "error"}, tt.args...)
			err := cli.Dispatch(ctx, args, io.Discard, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, what, 15*time.Second, cond)
}
