package controlplane_test

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/meshdns/meshdns/controlplane"
	"github.com/meshdns/meshdns/controlplane/auth"
	"github.com/meshdns/meshdns/internal/testkit/certtest"
)

// benchTLSEnv names, in a control plane child, the folder of its
// tls.crt, tls.key and ca.crt: it then serves mTLS and authenticates
// agents by their SPIFFE ID, as a VM-facing replica does.
const benchTLSEnv = "MESHDNS_BENCH_SERVER_TLS"

// benchTrustDomain is the SPIFFE trust domain of the benchmark's agents.
const benchTrustDomain = "cluster.local"

// benchPKI is the benchmark's CA and its server certificate's folder.
type benchPKI struct {
	ca  *certtest.CA
	dir string
}

func newBenchPKI(tb testing.TB) *benchPKI {
	tb.Helper()
	p := &benchPKI{ca: certtest.NewCA(tb, "meshdns bench ca"), dir: tb.TempDir()}
	crt, key := p.ca.Issue(tb, "controlplane", true)
	certtest.Write(tb, p.dir, "tls.crt", crt)
	certtest.Write(tb, p.dir, "tls.key", key)
	certtest.Write(tb, p.dir, "ca.crt", p.ca.PEM)
	return p
}

// bundle writes the CA and a client certificate for each of agents
// first to first+n-1 (agent i: spiffe://cluster.local/ns/ns-<i mod
// namespaces>/sa/agent-<i>, an identity of its own as a pod-bound token
// is, so the per-identity limits hold each agent alone) to one file, and
// returns its path.
func (p *benchPKI) bundle(tb testing.TB, first, n, namespaces int) string {
	tb.Helper()
	var b bytes.Buffer
	b.Write(p.ca.PEM)
	for i := first; i < first+n; i++ {
		id := fmt.Sprintf("spiffe://%s/ns/ns-%d/sa/agent-%d", benchTrustDomain, i%namespaces, i)
		crt, key := p.ca.Issue(tb, fmt.Sprintf("agent-%d", i), false, certtest.URIs(id))
		b.Write(crt)
		b.Write(key)
	}
	path := filepath.Join(p.dir, fmt.Sprintf("agents-%d.pem", first))
	if err := os.WriteFile(path, b.Bytes(), 0o600); err != nil {
		tb.Fatal(err)
	}
	return path
}

// bundles writes the bundles of the children of s (fleetSpec.bundles),
// before the clock of the connects starts: signing 10,000 certificates
// takes seconds.
func (p *benchPKI) bundles(tb testing.TB, s fleetSpec) []string {
	tb.Helper()
	var paths []string
	s.split(func(_, first, n int) { paths = append(paths, p.bundle(tb, first, n, max(s.namespaces, 1))) })
	return paths
}

// readBundle reads a bundle back as one client tls.Config per agent, in
// order.
func readBundle(path string) ([]*tls.Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read bundle: %w", err)
	}
	block, rest := pem.Decode(data)
	if block == nil {
		return nil, fmt.Errorf("read bundle %s: no CA certificate", path)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem.EncodeToMemory(block)) {
		return nil, fmt.Errorf("read bundle %s: bad CA certificate", path)
	}
	var confs []*tls.Config
	for len(bytes.TrimSpace(rest)) > 0 {
		crt, r := pem.Decode(rest)
		key, r2 := pem.Decode(r)
		if crt == nil || key == nil {
			return nil, fmt.Errorf("read bundle %s: agent %d: a certificate without its key", path, len(confs))
		}
		rest = r2
		pair, err := tls.X509KeyPair(pem.EncodeToMemory(crt), pem.EncodeToMemory(key))
		if err != nil {
			return nil, fmt.Errorf("read bundle %s: agent %d: %w", path, len(confs), err)
		}
		confs = append(confs, &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots, Certificates: []tls.Certificate{pair}})
	}
	return confs, nil
}

// benchServerTLS sets cfg up to serve mTLS from the folder named by
// benchTLSEnv, if any.
func benchServerTLS(cfg *controlplane.Config) error {
	dir := os.Getenv(benchTLSEnv)
	if dir == "" {
		return nil
	}
	cfg.TLSCert, cfg.TLSKey = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	cfg.ClientCA = filepath.Join(dir, "ca.crt")
	a, err := auth.SPIFFE(benchTrustDomain)
	if err != nil {
		return fmt.Errorf("spiffe authenticator: %w", err)
	}
	cfg.Authenticator = a
	return nil
}

// TestBenchBundle: the scale benchmark's agent certificates read back in
// order, each with its own SPIFFE ID, trusting the CA.
func TestBenchBundle(t *testing.T) {
	p := newBenchPKI(t)
	confs, err := readBundle(p.bundle(t, 10, 3, 2))
	if err != nil {
		t.Fatal(err)
	}
	if len(confs) != 3 {
		t.Fatalf("%d configurations, want 3", len(confs))
	}
	for k, c := range confs {
		leaf, err := x509.ParseCertificate(c.Certificates[0].Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("spiffe://cluster.local/ns/ns-%d/sa/agent-%d", (10+k)%2, 10+k)
		if len(leaf.URIs) != 1 || leaf.URIs[0].String() != want {
			t.Errorf("agent %d: %v, want %s", 10+k, leaf.URIs, want)
		}
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: c.RootCAs, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Errorf("agent %d: %v", 10+k, err)
		}
	}
}
