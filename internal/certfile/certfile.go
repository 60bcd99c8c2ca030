// Package certfile loads TLS certificates, keys and CA bundles from PEM
// files that may be replaced at any time (cert-manager renewals, rotated
// Secret volumes), for both ends of a connection. It is the one place
// meshdns reads TLS files: the control plane's gRPC and webhook servers
// and the agent's connection to the control plane.
//
// The files are checked with stat on every use (a handshake on a server,
// a new connection on a client), so a renewed certificate applies to the
// next connection without a watcher goroutine or a restart, and a bad or
// half-written file keeps the last good one in use.
package certfile

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"

	"github.com/meshdns/meshdns/internal/filewatch"
)

// Config names the files. The zero value of each field is documented.
type Config struct {
	// CertFile and KeyFile hold a PEM certificate (with its chain) and its
	// key; they go together. A server requires them; a client presents
	// them when set (mTLS).
	CertFile, KeyFile string
	// CAFile holds PEM CA certificates. On a server, clients must present
	// a certificate signed by one of them (mTLS); "" asks for none. On a
	// client, they verify the server; "" means the system roots.
	CAFile string
	// ServerName is the name a client verifies in the server's
	// certificate; "" means the host part of the address dialled.
	ServerName string
	// NextProtos for a server's ALPN; zero means h2 and http/1.1 (gRPC
	// requires h2).
	NextProtos []string
	// Logger; nil discards.
	Logger *slog.Logger
}

// Reloader hands out tls.Configs built from the files' latest valid
// contents.
type Reloader struct {
	cfg Config
	log *slog.Logger

	mu     sync.Mutex        // guards following
	stamp  [sha256.Size]byte // filewatch.Stamp of the files last tried
	tried  bool              // stamp is set
	loaded *loaded           // last good contents, or nil
}

// loaded is one good read of the files.
type loaded struct {
	pair *tls.Certificate // nil without CertFile
	pool *x509.CertPool   // nil without CAFile
	// server is the configuration handshakes use, built once per read
	// so session tickets survive between handshakes; nil without a pair.
	server *tls.Config
}

// New checks cfg and returns a reloader; it reads no file.
func New(cfg Config) (*Reloader, error) {
	if (cfg.CertFile == "") != (cfg.KeyFile == "") {
		return nil, errors.New("certfile: the certificate and key files go together")
	}
	if len(cfg.NextProtos) == 0 {
		cfg.NextProtos = []string{"h2", "http/1.1"}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Reloader{cfg: cfg, log: log}, nil
}

// ServerConfig loads the files and returns a server configuration whose
// handshakes use the files' latest valid contents. It fails if there is
// no certificate or the files are not valid now.
func (r *Reloader) ServerConfig() (*tls.Config, error) {
	if r.cfg.CertFile == "" {
		return nil, errors.New("certfile: a server needs a certificate and a key file")
	}
	if _, err := r.current(); err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: r.cfg.NextProtos,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			// A reload error is logged in current; keep serving the
			// last good certificate.
			l, _ := r.current()
			return l.server, nil
		},
	}, nil
}

// ClientConfig returns a client configuration from the files' latest
// valid contents, for one new connection. It fails only while no valid
// version of the files was ever read.
func (r *Reloader) ClientConfig() (*tls.Config, error) {
	l, err := r.current()
	if l == nil {
		return nil, err
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: r.cfg.ServerName, RootCAs: l.pool}
	if l.pair != nil {
		c.Certificates = []tls.Certificate{*l.pair}
	}
	return c, nil
}

// current returns the contents of the files as they are now, reading them
// again if stat says they changed. On a bad read it returns the last good
// contents (nil if none) and the error.
func (r *Reloader) current() (*loaded, error) {
	stamp := filewatch.Stamp(r.cfg.CertFile, r.cfg.KeyFile, r.cfg.CAFile)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.tried && stamp == r.stamp && r.loaded != nil {
		return r.loaded, nil
	}
	l, err := r.load()
	if err != nil {
		// Without a last good version the caller gets the error (a
		// start-up failure, a client that cannot connect); log only what
		// the caller does not see: a bad renewal under a good version.
		if r.loaded != nil && stamp != r.stamp {
			r.log.Error("tls files rejected; keeping the last good ones", "cert", r.cfg.CertFile, "ca", r.cfg.CAFile, "err", err)
		}
		r.stamp, r.tried = stamp, true
		return r.loaded, err
	}
	if r.loaded != nil {
		attrs := []any{"cert", r.cfg.CertFile, "ca", r.cfg.CAFile}
		if l.pair != nil {
			attrs = append(attrs, "not_after", l.pair.Leaf.NotAfter)
		}
		r.log.Info("tls files reloaded", attrs...)
	}
	r.stamp, r.tried, r.loaded = stamp, true, l
	return l, nil
}

func (r *Reloader) load() (*loaded, error) {
	var l loaded
	if r.cfg.CertFile != "" {
		pair, err := LoadPair(r.cfg.CertFile, r.cfg.KeyFile)
		if err != nil {
			return nil, err
		}
		l.pair = &pair
	}
	if r.cfg.CAFile != "" {
		pool, err := LoadPool(r.cfg.CAFile)
		if err != nil {
			return nil, err
		}
		l.pool = pool
	}
	if l.pair != nil {
		l.server = &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: r.cfg.NextProtos, Certificates: []tls.Certificate{*l.pair}}
		if l.pool != nil {
			l.server.ClientCAs = l.pool
			l.server.ClientAuth = tls.RequireAndVerifyClientCert
		}
	}
	return &l, nil
}

// LoadPair reads a PEM certificate and its key, with Leaf parsed.
func LoadPair(certFile, keyFile string) (tls.Certificate, error) {
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return pair, fmt.Errorf("load key pair %s %s: %w", certFile, keyFile, err)
	}
	if pair.Leaf == nil {
		if pair.Leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return pair, fmt.Errorf("parse certificate %s: %w", certFile, err)
		}
	}
	return pair, nil
}

// LoadPool reads PEM CA certificates; a file without any is an error.
func LoadPool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("CA file %s: no PEM certificates", file)
	}
	return pool, nil
}
