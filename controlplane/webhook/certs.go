package webhook

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
)

// certReloader holds the serving certificate and swaps it when the files
// change. A handshake never waits for a reload.
type certReloader struct {
	certFile, keyFile string

	cert atomic.Pointer[tls.Certificate] // nil until the first good load

	mu                sync.Mutex // guards the following
	lastCert, lastKey []byte     // contents of the current certificate
}

var errNoCertificate = errors.New("no serving certificate loaded")

// reload reads both files and swaps the certificate when they changed and
// form a valid pair. It reports whether the certificate changed. A bad
// pair (for example the certificate written before its key) keeps the old
// certificate; the next change event or poll retries.
func (c *certReloader) reload() (bool, error) {
	certPEM, err := os.ReadFile(c.certFile)
	if err != nil {
		return false, fmt.Errorf("read certificate: %w", err)
	}
	keyPEM, err := os.ReadFile(c.keyFile)
	if err != nil {
		return false, fmt.Errorf("read key: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if bytes.Equal(certPEM, c.lastCert) && bytes.Equal(keyPEM, c.lastKey) {
		return false, nil
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return false, fmt.Errorf("load key pair %s %s: %w", c.certFile, c.keyFile, err)
	}
	c.cert.Store(&pair)
	c.lastCert, c.lastKey = certPEM, keyPEM
	return true, nil
}

// getCertificate is tls.Config.GetCertificate.
func (c *certReloader) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if p := c.cert.Load(); p != nil {
		return p, nil
	}
	return nil, errNoCertificate
}
