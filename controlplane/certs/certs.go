// Package certs serves TLS certificates from files that may be replaced at
// any time (cert-manager renewals, rotated Kubernetes Secrets). The files
// are checked on every handshake, which costs three stat calls, so a new
// certificate or client CA applies to the next connection without a
// watcher goroutine and without a restart.
package certs

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
)

// Config names the files.
type Config struct {
	// CertFile and KeyFile hold the PEM server certificate (with its
	// chain) and key; required.
	CertFile, KeyFile string
	// ClientCAFile, when set, holds PEM CA certificates; clients must then
	// present a certificate signed by one of them (mTLS).
	ClientCAFile string
	// NextProtos for ALPN; zero means h2 and http/1.1 (gRPC requires h2).
	NextProtos []string
	// Logger; nil discards.
	Logger *slog.Logger
}

// Reloader hands out a tls.Config built from the current file contents.
type Reloader struct {
	cfg Config
	log *slog.Logger

	mu   sync.Mutex // guards following
	sig  string     // stat signature of the files last tried
	conf *tls.Config
}

// New returns a reloader; the files are read by TLSConfig.
func New(cfg Config) (*Reloader, error) {
	if cfg.CertFile == "" || cfg.KeyFile == "" {
		return nil, errors.New("certs: both a certificate and a key file are required")
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

// TLSConfig loads the files and returns a server configuration whose
// handshakes use the files' latest valid contents. It fails if the files
// are not valid now.
func (r *Reloader) TLSConfig() (*tls.Config, error) {
	if _, err := r.current(); err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: r.cfg.NextProtos,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			// A reload error is logged in current; keep serving the
			// last good certificate.
			c, _ := r.current()
			return c, nil
		},
	}, nil
}

// current returns the configuration for the files as they are now,
// reloading them if they changed. On a bad reload it returns the last good
// configuration and the error.
func (r *Reloader) current() (*tls.Config, error) {
	sig := r.signature()
	r.mu.Lock()
	defer r.mu.Unlock()
	if sig == r.sig && r.conf != nil {
		return r.conf, nil
	}
	conf, err := r.load()
	if err != nil {
		if sig != r.sig {
			r.log.Error("tls files rejected; keeping the last good certificate", "cert", r.cfg.CertFile, "err", err)
		}
		r.sig = sig
		if r.conf == nil {
			return nil, err
		}
		return r.conf, err
	}
	if r.conf != nil {
		r.log.Info("tls files reloaded", "cert", r.cfg.CertFile, "not_after", conf.Certificates[0].Leaf.NotAfter)
	}
	r.sig, r.conf = sig, conf
	return conf, nil
}

// signature changes when any file is replaced or rewritten. Stat follows
// symlinks, so the ..data swap of a mounted Secret shows up too.
func (r *Reloader) signature() string {
	var s string
	for _, f := range []string{r.cfg.CertFile, r.cfg.KeyFile, r.cfg.ClientCAFile} {
		if f == "" {
			continue
		}
		fi, err := os.Stat(f)
		if err != nil {
			s += "missing;"
			continue
		}
		s += fmt.Sprintf("%d:%d;", fi.ModTime().UnixNano(), fi.Size())
	}
	return s
}

func (r *Reloader) load() (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(r.cfg.CertFile, r.cfg.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("load key pair %s: %w", r.cfg.CertFile, err)
	}
	if cert.Leaf == nil {
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, fmt.Errorf("parse %s: %w", r.cfg.CertFile, err)
		}
	}
	conf := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: r.cfg.NextProtos, Certificates: []tls.Certificate{cert}}
	if r.cfg.ClientCAFile != "" {
		pem, err := os.ReadFile(r.cfg.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("read client ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("client ca %s: no PEM certificates", r.cfg.ClientCAFile)
		}
		conf.ClientCAs = pool
		conf.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return conf, nil
}
