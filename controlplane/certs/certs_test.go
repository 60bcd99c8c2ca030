package certs_test

import (
	"crypto/tls"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meshdns/meshdns/controlplane/certs"
	"github.com/meshdns/meshdns/internal/certtest"
)

func TestTLSConfig(t *testing.T) {
	dir := t.TempDir()
	ca := certtest.NewCA(t, "ca")
	c, k := ca.Issue(t, "server", true)
	cert := certtest.Write(t, dir, "tls.crt", c)
	key := certtest.Write(t, dir, "tls.key", k)
	caFile := certtest.Write(t, dir, "ca.crt", ca.PEM)
	junk := certtest.Write(t, dir, "junk", []byte("not pem"))
	tests := []struct {
		name       string
		cfg        certs.Config
		clientAuth tls.ClientAuthType
		wantErr    string
	}{
		{name: "server only", cfg: certs.Config{CertFile: cert, KeyFile: key}, clientAuth: tls.NoClientCert},
		{name: "mTLS", cfg: certs.Config{CertFile: cert, KeyFile: key, ClientCAFile: caFile}, clientAuth: tls.RequireAndVerifyClientCert},
		{name: "missing key", cfg: certs.Config{CertFile: cert, KeyFile: filepath.Join(dir, "nope")}, wantErr: "load key pair"},
		{name: "bad client CA", cfg: certs.Config{CertFile: cert, KeyFile: key, ClientCAFile: junk}, wantErr: "no PEM certificates"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := certs.New(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			conf, err := r.TLSConfig()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, err := conf.GetConfigForClient(&tls.ClientHelloInfo{})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.clientAuth, got.ClientAuth); diff != "" {
				t.Errorf("client auth (-want +got):\n%s", diff)
			}
			// gRPC clients refuse a server that does not select h2.
			if diff := cmp.Diff([]string{"h2", "http/1.1"}, got.NextProtos); diff != "" {
				t.Errorf("ALPN (-want +got):\n%s", diff)
			}
		})
	}
	if _, err := certs.New(certs.Config{CertFile: cert}); err == nil {
		t.Error("New accepted a config without a key")
	}
}
