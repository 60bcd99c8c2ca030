package server_test

import (
	"crypto/tls"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meshdns/meshdns/controlplane/internal/cptest"
	"github.com/meshdns/meshdns/internal/certfile"
	"github.com/meshdns/meshdns/internal/testkit/certtest"
)

func TestMTLS(t *testing.T) {
	dir := t.TempDir()
	ca := certtest.NewCA(t, "meshdns test ca")
	other := certtest.NewCA(t, "someone else")
	srvCert, srvKey := ca.Issue(t, "controlplane", true)
	certFile := certtest.Write(t, dir, "tls.crt", srvCert)
	keyFile := certtest.Write(t, dir, "tls.key", srvKey)
	caFile := certtest.Write(t, dir, "ca.crt", ca.PEM)
	rl, err := certfile.New(certfile.Config{CertFile: certFile, KeyFile: keyFile, CAFile: caFile})
	if err != nil {
		t.Fatal(err)
	}
	tlsConf, err := rl.ServerConfig()
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, harnessOpts{tls: tlsConf})
	h.publish(t, entry("a.corp.example", "10.0.0.1"))

	goodCert, goodKey := ca.Issue(t, "agent", false)
	badCert, badKey := other.Issue(t, "intruder", false)
	tests := []struct {
		name   string
		client *tls.Config
		ok     bool
	}{
		{name: "client certificate from the CA", client: certtest.ClientTLS(t, ca, goodCert, goodKey), ok: true},
		{name: "no client certificate", client: certtest.ClientTLS(t, ca, nil, nil)},
		{name: "client certificate from another CA", client: certtest.ClientTLS(t, ca, badCert, badKey)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.ok, canStream(t, h.addr, tc.client)); diff != "" {
				t.Errorf("stream works (-want +got):\n%s", diff)
			}
		})
	}

	t.Run("server certificate rotation", func(t *testing.T) {
		before := serverSerial(t, h.addr, certtest.ClientTLS(t, ca, goodCert, goodKey))
		c, k := ca.Issue(t, "controlplane-renewed", true)
		certtest.Write(t, dir, "tls.key", k)
		certtest.Write(t, dir, "tls.crt", c)
		after := serverSerial(t, h.addr, certtest.ClientTLS(t, ca, goodCert, goodKey))
		if before == after {
			t.Errorf("server still presents serial %s after rotation", before)
		}
	})

	t.Run("client CA rotation", func(t *testing.T) {
		certtest.Write(t, dir, "ca.crt", other.PEM)
		if canStream(t, h.addr, certtest.ClientTLS(t, ca, goodCert, goodKey)) {
			t.Error("client of the old CA still accepted")
		}
		if !canStream(t, h.addr, certtest.ClientTLS(t, ca, badCert, badKey)) {
			t.Error("client of the new CA refused")
		}
	})

	t.Run("bad files keep the last good certificate", func(t *testing.T) {
		certtest.Write(t, dir, "tls.crt", []byte("garbage"))
		if !canStream(t, h.addr, certtest.ClientTLS(t, ca, badCert, badKey)) {
			t.Error("stream refused after a bad certificate file")
		}
	})
}

// canStream reports whether an agent gets its table over TLS.
func canStream(t *testing.T, addr string, c *tls.Config) bool {
	t.Helper()
	a := cptest.Dial(t, addr, cptest.DialOpts{Namespace: "ns", TLS: c})
	defer a.Close()
	select {
	case r, ok := <-a.Resps:
		return ok && r != nil
	case <-timeAfter5s():
		t.Fatal("no answer")
	}
	return false
}

func serverSerial(t *testing.T, addr string, c *tls.Config) string {
	t.Helper()
	c.NextProtos = []string{"h2"}
	conn, err := tls.Dial("tcp", addr, c)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.String()
}
