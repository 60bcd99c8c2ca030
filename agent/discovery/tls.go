package discovery

import (
	"crypto/tls"
	"fmt"
	"io"
	"os"
	"strings"
)

// tlsConfig builds the TLS configuration of one connection from the
// certificate files as they are now; nil for plaintext (h2c).
func (c *Client) tlsConfig() (*tls.Config, error) {
	if c.tls == nil {
		return nil, nil
	}
	conf, err := c.tls.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("control plane tls: %w", err)
	}
	return conf, nil
}

// maxToken bounds the token file read; projected tokens are ~1 KB.
const maxToken = 64 << 10

// readToken reads the bearer token file as it is now (the kubelet rotates
// projected tokens by swapping the volume's ..data symlink).
func readToken(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("read token: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxToken+1))
	if err != nil {
		return "", fmt.Errorf("read token %s: %w", path, err)
	}
	tok := strings.TrimSpace(string(b))
	switch {
	case len(b) > maxToken:
		return "", fmt.Errorf("read token %s: longer than %d bytes", path, maxToken)
	case tok == "" || strings.ContainsAny(tok, " \t\r\n"):
		return "", fmt.Errorf("read token %s: empty or not one token", path)
	}
	return tok, nil
}
