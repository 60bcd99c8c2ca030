package certfile_test

import (
	"crypto/tls"
	"errors"
	"io"
	"math/big"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meshdns/meshdns/internal/certfile"
	"github.com/meshdns/meshdns/internal/testkit/certtest"
)

func TestServerConfig(t *testing.T) {
	dir := t.TempDir()
	ca := certtest.NewCA(t, "ca")
	c, k := ca.Issue(t, "server", true)
	cert := certtest.Write(t, dir, "tls.crt", c)
	key := certtest.Write(t, dir, "tls.key", k)
	caFile := certtest.Write(t, dir, "ca.crt", ca.PEM)
	junk := certtest.Write(t, dir, "junk", []byte("not pem"))
	tests := []struct {
		name       string
		cfg        certfile.Config
		clientAuth tls.ClientAuthType
		wantErr    string
	}{
		{name: "server only", cfg: certfile.Config{CertFile: cert, KeyFile: key}, clientAuth: tls.NoClientCert},
		{name: "mTLS", cfg: certfile.Config{CertFile: cert, KeyFile: key, CAFile: caFile}, clientAuth: tls.RequireAndVerifyClientCert},
		{name: "missing key", cfg: certfile.Config{CertFile: cert, KeyFile: filepath.Join(dir, "nope")}, wantErr: "load key pair"},
		{name: "bad client CA", cfg: certfile.Config{CertFile: cert, KeyFile: key, CAFile: junk}, wantErr: "no PEM certificates"},
		{name: "no certificate", cfg: certfile.Config{CAFile: caFile}, wantErr: "needs a certificate"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := certfile.New(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			conf, err := r.ServerConfig()
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
	if _, err := certfile.New(certfile.Config{CertFile: cert}); err == nil {
		t.Error("New accepted a certificate without a key")
	}
}

// serve accepts TLS connections on loopback with conf until the test ends.
// After a handshake it writes the serial of the client's certificate, or
// "none", and closes: a client that reads a reply was accepted (with TLS
// 1.3 a rejected client certificate only shows on the first read).
func serve(t *testing.T, conf *tls.Config) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", conf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			tc := c.(*tls.Conn)
			if tc.Handshake() == nil {
				reply := "none"
				if pc := tc.ConnectionState().PeerCertificates; len(pc) > 0 {
					reply = pc[0].SerialNumber.String()
				}
				_, _ = io.WriteString(tc, reply)
			}
			c.Close()
		}
	}()
	return ln.Addr().String()
}

// dial connects to addr and returns the serial of the server's
// certificate and the server's reply (the serial of ours), or the error.
func dial(addr string, conf *tls.Config) (*big.Int, string, error) {
	c, err := tls.DialWithDialer(&net.Dialer{}, "tcp", addr, conf)
	if err != nil {
		return nil, "", err
	}
	defer c.Close()
	reply, err := io.ReadAll(c)
	if err != nil {
		return nil, "", err
	}
	if len(reply) == 0 {
		return nil, "", errors.New("no reply")
	}
	return c.ConnectionState().PeerCertificates[0].SerialNumber, string(reply), nil
}

// A replaced server certificate is served from the next handshake on; a
// broken replacement keeps the last good one.
func TestServerRotation(t *testing.T) {
	dir := t.TempDir()
	ca := certtest.NewCA(t, "ca")
	c1, k1 := ca.Issue(t, "server", true, certtest.Serial(1))
	certFile, keyFile := certtest.WritePair(t, dir, c1, k1)
	r, err := certfile.New(certfile.Config{CertFile: certFile, KeyFile: keyFile})
	if err != nil {
		t.Fatal(err)
	}
	conf, err := r.ServerConfig()
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, conf)
	client := certtest.ClientTLS(t, ca, nil, nil)
	want := func(serial int64) {
		t.Helper()
		got, _, err := dial(addr, client)
		if err != nil {
			t.Fatal(err)
		}
		if got.Int64() != serial {
			t.Errorf("server presented serial %v, want %d", got, serial)
		}
	}
	want(1)
	c2, k2 := ca.Issue(t, "server", true, certtest.Serial(2))
	certtest.WritePair(t, dir, c2, k2)
	want(2)
	// A certificate written without its new key does not match the key:
	// the last good pair stays.
	c3, _ := ca.Issue(t, "server", true, certtest.Serial(3))
	certtest.Write(t, dir, "tls.crt", c3)
	want(2)
}

// A client presents its certificate and verifies the server with the CA
// file; a rotated client certificate is used by the next connection.
func TestClientConfig(t *testing.T) {
	dir := t.TempDir()
	ca := certtest.NewCA(t, "ca")
	rogue := certtest.NewCA(t, "rogue")
	sc, sk := ca.Issue(t, "controlplane", true)
	addr := serve(t, certtest.ServerTLS(t, sc, sk, ca))

	caFile := certtest.Write(t, dir, "ca.crt", ca.PEM)
	rogueFile := certtest.Write(t, dir, "rogue.crt", rogue.PEM)
	c1, k1 := ca.Issue(t, "agent", false, certtest.Serial(1))
	certFile, keyFile := certtest.WritePair(t, dir, c1, k1)
	tests := []struct {
		name    string
		cfg     certfile.Config
		wantErr bool
	}{
		{name: "mTLS with the right CA", cfg: certfile.Config{CAFile: caFile, CertFile: certFile, KeyFile: keyFile}},
		{name: "server not signed by the CA file", cfg: certfile.Config{CAFile: rogueFile, CertFile: certFile, KeyFile: keyFile}, wantErr: true},
		{name: "no client certificate", cfg: certfile.Config{CAFile: caFile}, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.ServerName = "127.0.0.1"
			r, err := certfile.New(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			conf, err := r.ClientConfig()
			if err != nil {
				t.Fatal(err)
			}
			_, reply, err := dial(addr, conf)
			if tc.wantErr != (err != nil) {
				t.Fatalf("dial: %v, want an error: %v", err, tc.wantErr)
			}
			if err == nil && reply != "1" {
				t.Errorf("server saw client serial %q, want 1", reply)
			}
		})
	}
	t.Run("rotated client certificate", func(t *testing.T) {
		r, err := certfile.New(certfile.Config{CAFile: caFile, CertFile: certFile, KeyFile: keyFile, ServerName: "127.0.0.1"})
		if err != nil {
			t.Fatal(err)
		}
		for serial := range int64(3) {
			if serial > 0 {
				c, k := ca.Issue(t, "agent", false, certtest.Serial(10+serial))
				certtest.WritePair(t, dir, c, k)
			}
			conf, err := r.ClientConfig()
			if err != nil {
				t.Fatal(err)
			}
			_, reply, err := dial(addr, conf)
			if err != nil {
				t.Fatal(err)
			}
			want := "1"
			if serial > 0 {
				want = strconv.FormatInt(10+serial, 10)
			}
			if reply != want {
				t.Errorf("server saw client serial %s, want %s", reply, want)
			}
		}
	})
}
