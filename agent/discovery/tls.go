package discovery

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// transportCredentials builds the credentials for one connection, reading
// the certificate files afresh so rotated files are picked up at the next
// reconnect.
func (c *Client) transportCredentials() (credentials.TransportCredentials, error) {
	if c.cfg.CACert == "" && c.cfg.TLSCert == "" {
		return insecure.NewCredentials(), nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.cfg.ServerName}
	if c.cfg.CACert != "" {
		pem, err := os.ReadFile(c.cfg.CACert)
		if err != nil {
			return nil, fmt.Errorf("read CA certificate: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, errors.New("CA certificate file holds no PEM certificate")
		}
		cfg.RootCAs = pool
	}
	if c.cfg.TLSCert != "" {
		cert, err := tls.LoadX509KeyPair(c.cfg.TLSCert, c.cfg.TLSKey)
		if err != nil {
			return nil, fmt.Errorf("load client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return credentials.NewTLS(cfg), nil
}
