package kubetest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki is the key material of one test cluster, written as PEM files into a
// folder. ECDSA P-256 keys because generating RSA keys costs hundreds of
// milliseconds per cluster on a small CI machine.
type pki struct {
	caCert     string // path of the CA certificate (serving and client CA)
	caPEM      []byte
	servCert   string // serving certificate of kube-apiserver
	servKey    string
	clientCert string // admin client certificate (system:masters)
	clientKey  string
	clientCPEM []byte
	clientKPEM []byte
	saKey      string // service-account signing key
	saPub      string // its public key
}

func writePKI(dir string) (*pki, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("ca key: %w", err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "meshdns-kubetest-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("ca cert: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, fmt.Errorf("parse ca cert: %w", err)
	}
	p := &pki{
		caCert:     filepath.Join(dir, "ca.crt"),
		servCert:   filepath.Join(dir, "apiserver.crt"),
		servKey:    filepath.Join(dir, "apiserver.key"),
		clientCert: filepath.Join(dir, "admin.crt"),
		clientKey:  filepath.Join(dir, "admin.key"),
		saKey:      filepath.Join(dir, "sa.key"),
		saPub:      filepath.Join(dir, "sa.pub"),
	}
	p.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	if err := os.WriteFile(p.caCert, p.caPEM, 0o600); err != nil {
		return nil, err
	}

	serv := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	certPEM, keyPEM, err := issue(serv, ca, caKey)
	if err != nil {
		return nil, fmt.Errorf("serving cert: %w", err)
	}
	if err := writePair(p.servCert, certPEM, p.servKey, keyPEM); err != nil {
		return nil, err
	}

	// Organization system:masters makes the holder a cluster admin under
	// both AlwaysAllow and RBAC authorization.
	client := &x509.Certificate{
		SerialNumber: big.NewInt(3),
		Subject:      pkix.Name{CommonName: "kubetest-admin", Organization: []string{"system:masters"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	p.clientCPEM, p.clientKPEM, err = issue(client, ca, caKey)
	if err != nil {
		return nil, fmt.Errorf("client cert: %w", err)
	}
	if err := writePair(p.clientCert, p.clientCPEM, p.clientKey, p.clientKPEM); err != nil {
		return nil, err
	}

	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("service-account key: %w", err)
	}
	saDER, err := x509.MarshalECPrivateKey(saKey)
	if err != nil {
		return nil, err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, err
	}
	if err := writePair(p.saPub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}),
		p.saKey, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: saDER})); err != nil {
		return nil, err
	}
	return p, nil
}

// issue signs tmpl with the CA and returns the certificate and a fresh key
// as PEM.
func issue(tmpl, ca *x509.Certificate, caKey *ecdsa.PrivateKey) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}

func writePair(certPath string, certPEM []byte, keyPath string, keyPEM []byte) error {
	if err := os.WriteFile(certPath, certPEM, 0o600); err != nil {
		return err
	}
	return os.WriteFile(keyPath, keyPEM, 0o600)
}
