package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshdns/meshdns/cmd/internal/cli"
	"github.com/meshdns/meshdns/internal/testkit/certtest"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

// TestMountedCertHandsAgentsCA runs the cert-manager shape: the webhook's
// and the gRPC server's certificates are mounted files signed by one CA,
// whose ca.crt is --inject-ca. The webhook's patch must carry that CA to
// the pod and turn on TLS, and a real agent given the CA from the patch
// must verify the control plane and get its table. A CA file that turns
// bad keeps the last good CA in the patches.
func TestMountedCertHandsAgentsCA(t *testing.T) {
	dir := t.TempDir()
	ca := certtest.NewCA(t, "cert-manager-ca")
	c, k := ca.Issue(t, "webhook", true)
	whCert, whKey := certtest.WritePair(t, mkdir(t, dir, "webhook"), c, k)
	c, k = ca.Issue(t, "grpc", true)
	grpcCert, grpcKey := certtest.WritePair(t, mkdir(t, dir, "grpc"), c, k)
	caFile := certtest.Write(t, dir, "ca.crt", ca.PEM)

	grpcAddr, adminAddr, webhookAddr := testenv.FreeAddr(t), testenv.FreeAddr(t), testenv.FreeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	start := func(name string, args ...string) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := cli.Dispatch(ctx, args, io.Discard, io.Discard); err != nil && ctx.Err() == nil {
				t.Errorf("%s: %v", name, err)
			}
		}()
	}
	start("controlplane", "controlplane", "--insecure-allow-unauthenticated", "--entries", "../../examples/entries",
		"--grpc-addr", grpcAddr, "--tls-cert", grpcCert, "--tls-key", grpcKey, "--admin-addr", adminAddr,
		"--webhook-addr", webhookAddr, "--webhook-cert", whCert, "--webhook-key", whKey, "--inject-ca", caFile,
		"--log-level", "error")

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.PEM)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	t.Cleanup(client.CloseIdleConnections)
	review := []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u1",` +
		`"resource":{"version":"v1","resource":"pods"},"operation":"CREATE","namespace":"demo",` +
		`"object":{"spec":{"containers":[{"name":"app","image":"app"}]}}}}`)
	// patched returns the CA annotation and the agent's arguments of the
	// webhook's answer.
	patched := func() (caPEM string, args []string, err error) {
		res, err := client.Post("https://"+webhookAddr+"/inject", "application/json", bytes.NewReader(review))
		if err != nil {
			return "", nil, err
		}
		defer res.Body.Close()
		var out struct {
			Response struct {
				Patch []byte `json:"patch"`
			} `json:"response"`
		}
		if err := json.NewDecoder(res.Body).Decode(&out); err != nil {
			return "", nil, err
		}
		var ops []struct {
			Path  string          `json:"path"`
			Value json.RawMessage `json:"value"`
		}
		if err := json.Unmarshal(out.Response.Patch, &ops); err != nil {
			return "", nil, err
		}
		for _, op := range ops {
			switch op.Path {
			case "/metadata/annotations":
				var a map[string]string
				_ = json.Unmarshal(op.Value, &a)
				caPEM = a["meshdns.io/control-plane-ca"]
			case "/spec/initContainers":
				var cs []struct {
					Name string   `json:"name"`
					Args []string `json:"args"`
				}
				_ = json.Unmarshal(op.Value, &cs)
				for _, c := range cs {
					if c.Name == "meshdns-agent" {
						args = c.Args
					}
				}
			}
		}
		return caPEM, args, nil
	}
	var caPEM string
	var args []string
	waitFor(t, "webhook serving", func() bool {
		var err error
		caPEM, args, err = patched()
		return err == nil
	})
	if caPEM != string(ca.PEM) {
		t.Fatalf("patch hands the pod CA %q, want the --inject-ca file", caPEM)
	}
	if !strings.Contains(strings.Join(args, " "), "--ca-cert /var/run/secrets/meshdns/ca.crt") {
		t.Fatalf("agent args %q lack --ca-cert: it would dial in plaintext", args)
	}

	// The agent as the pod runs it: the CA file is what the downward API
	// writes from the annotation.
	podCA := certtest.Write(t, dir, "pod-ca.crt", []byte(caPEM))
	agentAdmin := testenv.FreeAddr(t)
	start("agent", "agent", "--control-plane", grpcAddr, "--ca-cert", podCA, "--namespace", "demo", "--pod-name", "web-0",
		"--resolv-conf", "../../examples/resolv.conf", "--upstream", "127.0.0.1", "--dns-addr", testenv.FreeAddr(t),
		"--admin-addr", agentAdmin, "--log-level", "error")
	waitFor(t, "the agent verifies the control plane and gets its table", func() bool {
		res, err := http.Get("http://" + agentAdmin + "/healthz/ready")
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK
	})

	// A bad version of the CA file keeps the last good CA; a new good one
	// is taken.
	certtest.Write(t, dir, "ca.crt", []byte("not a certificate, with a different size\n"))
	if got, _, err := patched(); err != nil || got != string(ca.PEM) {
		t.Errorf("after a bad CA file the patch hands %q (err %v), want the last good CA", got, err)
	}
	other := certtest.NewCA(t, "rotated-ca")
	certtest.Write(t, dir, "ca.crt", append(append([]byte(nil), ca.PEM...), other.PEM...))
	waitFor(t, "the rotated CA bundle in the patch", func() bool {
		got, _, err := patched()
		return err == nil && strings.Contains(got, string(other.PEM))
	})
}

func TestInjectCAFlagErrors(t *testing.T) {
	dir := t.TempDir()
	notPEM := certtest.Write(t, dir, "ca.crt", []byte("hello\n"))
	for name, tc := range map[string]struct {
		args    []string
		wantErr string
	}{
		"without the webhook": {args: []string{"--inject-ca", notPEM}, wantErr: "need --webhook-secret or --webhook-cert"},
		"missing file":        {args: []string{"--webhook-cert", "c", "--webhook-key", "k", "--inject-ca", filepath.Join(dir, "nope")}, wantErr: "--inject-ca " + filepath.Join(dir, "nope") + ": no such file"},
		"no certificate":      {args: []string{"--webhook-cert", "c", "--webhook-key", "k", "--inject-ca", notPEM}, wantErr: "no PEM certificate"},
	} {
		t.Run(name, func(t *testing.T) {
			args := append([]string{"controlplane", "--insecure-allow-unauthenticated", "--entries", "../../examples/entries",
				"--grpc-addr", testenv.FreeAddr(t), "--admin-addr", testenv.FreeAddr(t), "--log-level", "error"}, tc.args...)
			err := cli.Dispatch(context.Background(), args, io.Discard, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

func mkdir(t *testing.T, dir, name string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.Mkdir(p, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}
