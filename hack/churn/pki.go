package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"
)

// trustDomain is the SPIFFE trust domain of the simulated pods.
const trustDomain = "cluster.local"

// pki is the run's throwaway CA and the control plane's certificate, in
// dir: ca.crt and ca.key (the fleet processes sign their agents'
// certificates with it), tls.crt and tls.key (the control plane's, for
// 127.0.0.1).
type pki struct {
	dir  string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

// newPKI makes the CA and the server certificate in dir.
func newPKI(dir string) (*pki, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("ca key: %w", err)
	}
	tmpl := certTemplate("meshdns churn ca")
	tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("ca certificate: %w", err)
	}
	if err := writePEM(dir, "ca.crt", "CERTIFICATE", der); err != nil {
		return nil, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("ca key: %w", err)
	}
	if err := writePEM(dir, "ca.key", "EC PRIVATE KEY", kder); err != nil {
		return nil, err
	}
	p, err := loadPKI(dir)
	if err != nil {
		return nil, err
	}
	st := certTemplate("controlplane")
	st.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	st.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	crt, skey, err := p.issue(st)
	if err != nil {
		return nil, err
	}
	if err := writePEM(dir, "tls.crt", "CERTIFICATE", crt.Certificate[0]); err != nil {
		return nil, err
	}
	sk, err := x509.MarshalECPrivateKey(skey)
	if err != nil {
		return nil, fmt.Errorf("server key: %w", err)
	}
	return p, writePEM(dir, "tls.key", "EC PRIVATE KEY", sk)
}

// loadPKI reads the CA a run made (in a fleet process).
func loadPKI(dir string) (*pki, error) {
	cb, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		return nil, fmt.Errorf("read ca: %w", err)
	}
	kb, err := os.ReadFile(filepath.Join(dir, "ca.key"))
	if err != nil {
		return nil, fmt.Errorf("read ca key: %w", err)
	}
	cblk, _ := pem.Decode(cb)
	kblk, _ := pem.Decode(kb)
	if cblk == nil || kblk == nil {
		return nil, errors.New("read ca: not PEM")
	}
	cert, err := x509.ParseCertificate(cblk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parse ca: %w", err)
	}
	key, err := x509.ParseECPrivateKey(kblk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parse ca key: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &pki{dir: dir, cert: cert, key: key, pool: pool}, nil
}

// agentTLS is agent i's client configuration: a certificate of its own
// SPIFFE ID, spiffe://cluster.local/ns/<namespace>/sa/agent-<i>, so the
// control plane's per-identity bounds hold each agent alone, as a pod's
// own credential does.
func (p *pki) agentTLS(i int, namespace string) (*tls.Config, error) {
	t := certTemplate(fmt.Sprintf("agent-%d", i))
	t.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	t.URIs = []*url.URL{{Scheme: "spiffe", Host: trustDomain, Path: fmt.Sprintf("/ns/%s/sa/agent-%d", namespace, i)}}
	crt, _, err := p.issue(t)
	if err != nil {
		return nil, err
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: p.pool, Certificates: []tls.Certificate{crt}}, nil
}

func (p *pki) issue(t *x509.Certificate) (tls.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("key of %s: %w", t.Subject.CommonName, err)
	}
	der, err := x509.CreateCertificate(rand.Reader, t, p.cert, &key.PublicKey, p.key)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("certificate of %s: %w", t.Subject.CommonName, err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, key, nil
}

// certTemplate is valid from an hour ago for a day: longer than any
// bounded run.
func certTemplate(cn string) *x509.Certificate {
	serial, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	now := time.Now()
	return &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: cn},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), KeyUsage: x509.KeyUsageDigitalSignature}
}

func writePEM(dir, name, typ string, der []byte) error {
	b := pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
	if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	return nil
}
