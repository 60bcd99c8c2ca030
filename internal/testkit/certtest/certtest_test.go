package certtest_test

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meshdns/meshdns/internal/testkit/certtest"
)

func parse(t *testing.T, certPEM []byte) *x509.Certificate {
	t.Helper()
	b, _ := pem.Decode(certPEM)
	if b == nil {
		t.Fatal("no PEM block")
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestIssueVerifies(t *testing.T) {
	ca := certtest.NewCA(t, "ca")
	other := certtest.NewCA(t, "other")
	srv, _ := ca.Issue(t, "server", true, certtest.DNSNames("webhook.meshdns.svc"))
	cli, _ := ca.Issue(t, "client", false)
	tests := []struct {
		name    string
		cert    []byte
		roots   *certtest.CA
		host    string
		usage   x509.ExtKeyUsage
		wantErr bool
	}{
		{name: "server for 127.0.0.1", cert: srv, roots: ca, host: "127.0.0.1", usage: x509.ExtKeyUsageServerAuth},
		{name: "server for ::1", cert: srv, roots: ca, host: "::1", usage: x509.ExtKeyUsageServerAuth},
		{name: "server for localhost", cert: srv, roots: ca, host: "localhost", usage: x509.ExtKeyUsageServerAuth},
		{name: "server for an extra DNS name", cert: srv, roots: ca, host: "webhook.meshdns.svc", usage: x509.ExtKeyUsageServerAuth},
		{name: "server for another name", cert: srv, roots: ca, host: "example.com", usage: x509.ExtKeyUsageServerAuth, wantErr: true},
		{name: "server under another CA", cert: srv, roots: other, host: "127.0.0.1", usage: x509.ExtKeyUsageServerAuth, wantErr: true},
		{name: "client", cert: cli, roots: ca, usage: x509.ExtKeyUsageClientAuth},
		{name: "client as a server", cert: cli, roots: ca, usage: x509.ExtKeyUsageServerAuth, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pool := x509.NewCertPool()
			pool.AddCert(tt.roots.Cert)
			_, err := parse(t, tt.cert).Verify(x509.VerifyOptions{Roots: pool, DNSName: tt.host, KeyUsages: []x509.ExtKeyUsage{tt.usage}})
			if diff := cmp.Diff(tt.wantErr, err != nil); diff != "" {
				t.Errorf("Verify err = %v (-want +got):\n%s", err, diff)
			}
		})
	}
}

func TestSerial(t *testing.T) {
	ca := certtest.NewCA(t, "ca")
	c, _ := ca.Issue(t, "server", true, certtest.Serial(7))
	if diff := cmp.Diff(int64(7), parse(t, c).SerialNumber.Int64()); diff != "" {
		t.Errorf("serial (-want +got):\n%s", diff)
	}
	a, _ := ca.Issue(t, "a", false)
	b, _ := ca.Issue(t, "b", false)
	if parse(t, a).SerialNumber.Cmp(parse(t, b).SerialNumber) == 0 {
		t.Error("two certificates without Serial share a serial")
	}
}

func TestWritePair(t *testing.T) {
	dir := t.TempDir()
	c, k := certtest.NewCA(t, "ca").Issue(t, "server", true)
	certFile, keyFile := certtest.WritePair(t, dir, c, k)
	for _, f := range []struct {
		path string
		want []byte
	}{{certFile, c}, {keyFile, k}} {
		got, err := os.ReadFile(f.path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(f.want, got) {
			t.Errorf("%s does not hold what was written", f.path)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if diff := cmp.Diff([]string{"tls.crt", "tls.key"}, names); diff != "" {
		t.Errorf("files (-want +got):\n%s", diff)
	}
}

// TestHandshake runs mTLS over loopback with the two configurations.
func TestHandshake(t *testing.T) {
	ca := certtest.NewCA(t, "ca")
	other := certtest.NewCA(t, "other")
	srvCert, srvKey := ca.Issue(t, "server", true)
	goodCert, goodKey := ca.Issue(t, "agent", false)
	badCert, badKey := other.Issue(t, "intruder", false)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", certtest.ServerTLS(t, srvCert, srvKey, ca))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				_ = conn.(*tls.Conn).Handshake()
				_, _ = conn.Write([]byte("ok"))
			}()
		}
	}()
	tests := []struct {
		name   string
		client *tls.Config
		ok     bool
	}{
		{name: "client certificate from the CA", client: certtest.ClientTLS(t, ca, goodCert, goodKey), ok: true},
		{name: "no client certificate", client: certtest.ClientTLS(t, ca, nil, nil)},
		{name: "client certificate from another CA", client: certtest.ClientTLS(t, ca, badCert, badKey)},
		{name: "server from an untrusted CA", client: certtest.ClientTLS(t, other, goodCert, goodKey)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// With TLS 1.3 the server's verdict on the client certificate
			// arrives after the client's handshake: read to see it.
			conn, err := tls.Dial("tcp", ln.Addr().String(), tt.client)
			ok := err == nil
			if ok {
				buf := make([]byte, 2)
				_, err = conn.Read(buf)
				ok = err == nil
				conn.Close()
			}
			if diff := cmp.Diff(tt.ok, ok); diff != "" {
				t.Errorf("handshake ok (-want +got), err %v:\n%s", err, diff)
			}
		})
	}
}
