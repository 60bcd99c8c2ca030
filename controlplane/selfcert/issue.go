package selfcert

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
	"strings"
	"time"
)

// pair is a certificate and its key in PEM, as stored in the Secret.
type pair struct {
	certPEM, keyPEM []byte
}

// newCA makes a self-signed CA valid from now for validity that can sign
// only what the control plane serves: leaf certificates (path length 0,
// no intermediate CA) for dnsNames (and their subdomains) and ips (name
// constraints, critical). A stolen CA key cannot mint a certificate for
// any other name that a client trusting the bundle would accept.
func newCA(cn string, now time.Time, validity time.Duration, dnsNames []string, ips []net.IP) (pair, error) {
	tmpl := &x509.Certificate{
		Subject:                     pkix.Name{CommonName: cn},
		NotBefore:                   now.Add(-backdate), // clock skew between nodes
		NotAfter:                    now.Add(validity),
		KeyUsage:                    x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid:       true,
		IsCA:                        true,
		MaxPathLen:                  0,
		MaxPathLenZero:              true,
		PermittedDNSDomainsCritical: true,
		PermittedDNSDomains:         dnsNames,
	}
	for _, ip := range ips {
		bits := 128
		if ip4 := ip.To4(); ip4 != nil {
			ip, bits = ip4, 32
		}
		tmpl.PermittedIPRanges = append(tmpl.PermittedIPRanges, &net.IPNet{IP: ip, Mask: net.CIDRMask(bits, bits)})
	}
	return sign(tmpl, nil, nil)
}

// permits reports whether ca may sign for every one of dnsNames and ips:
// its name constraints, when it has any, include them. A CA made before
// it had constraints permits everything and is kept until it is due.
func permits(ca *x509.Certificate, dnsNames []string, ips []net.IP) bool {
	if len(ca.PermittedDNSDomains) == 0 && len(ca.PermittedIPRanges) == 0 {
		return true
	}
	for _, n := range dnsNames {
		ok := false
		for _, d := range ca.PermittedDNSDomains {
			if n == d || strings.HasSuffix(n, "."+d) {
				ok = true
			}
		}
		if !ok {
			return false
		}
	}
	for _, ip := range ips {
		ok := false
		for _, r := range ca.PermittedIPRanges {
			if r.Contains(ip) {
				ok = true
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

// newServing makes a serving certificate for dnsNames and ips, signed by ca.
func newServing(ca pair, dnsNames []string, ips []net.IP, now time.Time, validity time.Duration) (pair, error) {
	caCert, caKey, err := ca.parse()
	if err != nil {
		return pair{}, fmt.Errorf("ca: %w", err)
	}
	cn := "meshdns"
	if len(dnsNames) > 0 {
		cn = dnsNames[0]
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: cn},
		DNSNames:    dnsNames,
		IPAddresses: ips,
		NotBefore:   now.Add(-backdate),
		NotAfter:    earlier(now.Add(validity), caCert.NotAfter),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	return sign(tmpl, caCert, caKey)
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// sign creates the certificate of tmpl with a new P-256 key, signed by
// parent (self-signed when parent is nil).
func sign(tmpl, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (pair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return pair{}, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return pair{}, err
	}
	tmpl.SerialNumber = serial
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		return pair{}, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return pair{}, err
	}
	return pair{
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}, nil
}

// parse returns the certificate and its ECDSA key.
func (p pair) parse() (*x509.Certificate, *ecdsa.PrivateKey, error) {
	tc, err := tls.X509KeyPair(p.certPEM, p.keyPEM)
	if err != nil {
		return nil, nil, err
	}
	leaf, err := x509.ParseCertificate(tc.Certificate[0])
	if err != nil {
		return nil, nil, err
	}
	key, ok := tc.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		return nil, nil, errors.New("not an ECDSA key")
	}
	return leaf, key, nil
}

// tlsCertificate returns p for a tls.Config, with its leaf parsed.
func (p pair) tlsCertificate() (*tls.Certificate, error) {
	tc, err := tls.X509KeyPair(p.certPEM, p.keyPEM)
	if err != nil {
		return nil, err
	}
	if tc.Leaf, err = x509.ParseCertificate(tc.Certificate[0]); err != nil {
		return nil, err
	}
	return &tc, nil
}

// covers reports whether the serving certificate names every one of
// dnsNames and ips and was signed by ca.
func covers(serving *x509.Certificate, ca *x509.Certificate, dnsNames []string, ips []net.IP) bool {
	if serving.CheckSignatureFrom(ca) != nil {
		return false
	}
	for _, n := range dnsNames {
		if serving.VerifyHostname(n) != nil {
			return false
		}
	}
	for _, ip := range ips {
		if serving.VerifyHostname(ip.String()) != nil {
			return false
		}
	}
	return true
}

// parseCert returns the first certificate of p.certPEM.
func (p pair) parseCert() (*x509.Certificate, []byte, error) {
	b, rest := pem.Decode(p.certPEM)
	if b == nil {
		return nil, nil, errors.New("no PEM certificate")
	}
	c, err := x509.ParseCertificate(b.Bytes)
	return c, rest, err
}
