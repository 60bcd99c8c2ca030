// Package certtest makes throwaway PKIs for tests: a CA, the server and
// client certificates it signs as PEM, files written the way a rotated
// Kubernetes Secret is, and the tls.Configs of both ends. It lives under
// internal/ so that the agent, the control plane and the command share one
// copy (the agent may not import controlplane/...).
package certtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"github.com/meshdns/meshdns/internal/atomicfile"
)

// Validity is how long certificates are valid, from an hour in the past so
// that a skewed clock does not matter.
const Validity = 24 * time.Hour

// CA is a test certificate authority. ECDSA P-256 keys: an RSA key costs
// hundreds of milliseconds on a small CI machine.
type CA struct {
	Cert *x509.Certificate
	PEM  []byte // Cert as PEM, for CA files and caBundles
	key  *ecdsa.PrivateKey
}

// Option changes a certificate Issue signs.
type Option func(*x509.Certificate)

// Serial sets the serial number, for tests that tell certificates apart by
// it. Without it the serial is random.
func Serial(n int64) Option {
	return func(c *x509.Certificate) { c.SerialNumber = big.NewInt(n) }
}

// DNSNames adds DNS SANs to the ones Issue puts in a server certificate.
func DNSNames(names ...string) Option {
	return func(c *x509.Certificate) { c.DNSNames = append(c.DNSNames, names...) }
}

// URIs adds URI SANs, such as a SPIFFE ID
// (spiffe://cluster.local/ns/team-a/sa/default).
func URIs(uris ...string) Option {
	return func(c *x509.Certificate) {
		for _, s := range uris {
			u, err := url.Parse(s)
			if err != nil {
				panic("certtest.URIs: " + err.Error())
			}
			c.URIs = append(c.URIs, u)
		}
	}
}

func newSerial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func encodeCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// NewCA returns a fresh self-signed CA named cn.
func NewCA(t testing.TB, cn string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          newSerial(t),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(Validity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &CA{Cert: cert, PEM: encodeCert(der), key: key}
}

// Issue signs a certificate for cn and returns it and its key as PEM. A
// server certificate (server true) is for 127.0.0.1, ::1 and localhost plus
// any DNSNames option; otherwise it is a client certificate.
func (ca *CA) Issue(t testing.TB, cn string, server bool, opts ...Option) (certPEM, keyPEM []byte) {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: newSerial(t),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(Validity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.DNSNames = []string{"localhost"}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	}
	for _, o := range opts {
		o(tmpl)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return encodeCert(der), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

// Write writes data to dir/name and returns the path. It writes beside and
// renames, as a Secret or ConfigMap volume update does, so a reader never
// sees half a file.
func Write(t testing.TB, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := atomicfile.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// WritePair writes a kubernetes.io/tls Secret's files into dir, tls.key
// then tls.crt, each with Write, and returns their paths.
func WritePair(t testing.TB, dir string, certPEM, keyPEM []byte) (certFile, keyFile string) {
	t.Helper()
	keyFile = Write(t, dir, "tls.key", keyPEM)
	certFile = Write(t, dir, "tls.crt", certPEM)
	return certFile, keyFile
}

// ServerTLS returns a server configuration presenting the given
// certificate. When clientCA is not nil, client certificates are required
// and verified against it (mTLS).
func ServerTLS(t testing.TB, certPEM, keyPEM []byte, clientCA *CA) *tls.Config {
	t.Helper()
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	c := &tls.Config{Certificates: []tls.Certificate{pair}}
	if clientCA != nil {
		pool := x509.NewCertPool()
		pool.AddCert(clientCA.Cert)
		c.ClientCAs = pool
		c.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return c
}

// ClientTLS returns a client configuration for a server at 127.0.0.1 that
// trusts ca, presenting the given certificate when certPEM is not nil.
func ClientTLS(t testing.TB, ca *CA, certPEM, keyPEM []byte) *tls.Config {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	c := &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
	if certPEM != nil {
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		c.Certificates = []tls.Certificate{pair}
	}
	return c
}
