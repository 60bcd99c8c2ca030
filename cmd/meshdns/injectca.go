package main

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/meshdns/meshdns/cmd/internal/cli"
)

// injectCA hands injected agents the CA bundle of --inject-ca: the CA that
// verifies the control plane's gRPC certificate when that certificate is
// mounted (cert-manager's ca.crt) rather than made by the control plane.
// The file is re-read when it changes (a ConfigMap or Secret volume swaps
// it), and a version that holds no certificate keeps the last good one, so
// a bad edit never makes the webhook inject agents that trust nothing.
type injectCA struct {
	path string
	log  *slog.Logger

	mu   sync.Mutex // guards following
	mod  time.Time
	size int64
	pem  []byte
}

// loadInjectCA reads path once; an unreadable or certificate-less file is
// an error, reported at start like the other files of the control plane.
func loadInjectCA(path string, log *slog.Logger) (*injectCA, error) {
	c := &injectCA{path: path, log: log}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("--inject-ca %s: %w", path, cli.PathError(err))
	}
	data, err := os.ReadFile(path)
	if err == nil {
		err = checkCABundle(data)
	}
	if err != nil {
		return nil, fmt.Errorf("--inject-ca %s: %w", path, cli.PathError(err))
	}
	c.mod, c.size, c.pem = fi.ModTime(), fi.Size(), data
	return c, nil
}

// bundle returns the current CA bundle, re-reading the file when its
// modification time or size changed.
func (c *injectCA) bundle() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	fi, err := os.Stat(c.path)
	if err != nil || (fi.ModTime().Equal(c.mod) && fi.Size() == c.size) {
		return c.pem
	}
	data, err := os.ReadFile(c.path)
	if err == nil {
		err = checkCABundle(data)
	}
	if err != nil {
		c.log.Error("inject CA not reloaded, keeping the last good one", "file", c.path, "err", err)
		return c.pem
	}
	c.mod, c.size, c.pem = fi.ModTime(), fi.Size(), data
	c.log.Info("inject CA reloaded", "file", c.path)
	return c.pem
}

// checkCABundle accepts PEM that holds at least one certificate and
// nothing that fails to parse as one.
func checkCABundle(data []byte) error {
	n := 0
	for rest := data; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			return fmt.Errorf("PEM block %q is not a certificate", b.Type)
		}
		if _, err := x509.ParseCertificate(b.Bytes); err != nil {
			return fmt.Errorf("certificate %d: %w", n+1, err)
		}
		n++
	}
	if n == 0 {
		return errors.New("no PEM certificate")
	}
	return nil
}
