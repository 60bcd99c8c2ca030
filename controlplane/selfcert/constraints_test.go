package selfcert

import (
	"context"
	"crypto/ecdsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"net"
	"testing"
	"time"
)

// TestCAConstraints checks that the CA signs only leaves for the names it
// serves: a certificate its key signs for another name, or an
// intermediate CA, does not verify against the bundle, while the served
// certificate does; and a CA whose constraints leave out a configured
// name is rotated.
func TestCAConstraints(t *testing.T) {
	e := newEnv(t)
	m := e.manager(t, nil)
	if err := m.Ensure(context.Background()); err != nil {
		t.Fatal(err)
	}
	sec, err := e.api.GetSecret(context.Background(), e.ns, defaultName)
	if err != nil {
		t.Fatal(err)
	}
	ca, caKey, err := pair{certPEM: sec.Data[keyCACert], keyPEM: sec.Data[keyCAKey]}.parse()
	if err != nil {
		t.Fatal(err)
	}
	if !ca.BasicConstraintsValid || ca.MaxPathLen != 0 || !ca.MaxPathLenZero || !ca.PermittedDNSDomainsCritical {
		t.Errorf("CA basic constraints: pathlen %d zero %v, name constraints critical %v", ca.MaxPathLen, ca.MaxPathLenZero, ca.PermittedDNSDomainsCritical)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	now := e.clock()
	check := func(name string, leaf *x509.Certificate, inter *x509.Certificate, host string, want bool) {
		t.Helper()
		opts := x509.VerifyOptions{Roots: roots, CurrentTime: now, DNSName: host, Intermediates: x509.NewCertPool()}
		if inter != nil {
			opts.Intermediates.AddCert(inter)
		}
		_, err := leaf.Verify(opts)
		if (err == nil) != want {
			t.Errorf("%s: verify err %v, want ok=%v", name, err, want)
		}
	}
	served := verify(t, m, e.bundle(t), now)
	check("served certificate", served, nil, host, true)
	check("served certificate by IP", served, nil, "127.0.0.1", true)

	forge := func(tmpl *x509.Certificate, parent *x509.Certificate, key *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey) {
		t.Helper()
		tmpl.NotBefore, tmpl.NotAfter = now.Add(-time.Hour), now.Add(time.Hour)
		p, err := sign(tmpl, parent, key)
		if err != nil {
			t.Fatal(err)
		}
		c, k, err := p.parse()
		if err != nil {
			t.Fatal(err)
		}
		return c, k
	}
	other, _ := forge(&x509.Certificate{Subject: pkix.Name{CommonName: "kubernetes.default.svc"}, DNSNames: []string{"kubernetes.default.svc"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, ca, caKey)
	check("leaf for another name", other, nil, "kubernetes.default.svc", false)
	otherIP, _ := forge(&x509.Certificate{Subject: pkix.Name{CommonName: "x"}, IPAddresses: []net.IP{net.IPv4(10, 0, 0, 1)},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, ca, caKey)
	check("leaf for another IP", otherIP, nil, "10.0.0.1", false)
	inter, interKey := forge(&x509.Certificate{Subject: pkix.Name{CommonName: "intermediate"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}, ca, caKey)
	viaInter, _ := forge(&x509.Certificate{Subject: pkix.Name{CommonName: host}, DNSNames: []string{host},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, inter, interKey)
	check("leaf under an intermediate", viaInter, inter, host, false)

	// The names change: the CA cannot sign for the new one, so it is
	// rotated (the old one stays in the bundle) and the new certificate
	// verifies.
	moved, err := New(Config{API: e.api, Namespace: e.ns, DNSNames: []string{"meshdns.other.svc"}, Now: e.clock})
	if err != nil {
		t.Fatal(err)
	}
	if err := moved.Ensure(context.Background()); err != nil {
		t.Fatal(err)
	}
	tc, err := moved.GetCertificate(nil)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(moved.CABundle())
	if _, err := tc.Leaf.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: now, DNSName: "meshdns.other.svc"}); err != nil {
		t.Errorf("after the names changed: %v", err)
	}
	sec, err = e.api.GetSecret(context.Background(), e.ns, defaultName)
	if err != nil {
		t.Fatal(err)
	}
	if string(sec.Data[keyPrevCA]) == "" {
		t.Error("the old CA left the bundle at the rotation")
	}
}
