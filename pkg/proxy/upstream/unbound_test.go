package upstream

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/internal/testkit/certtest"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

// unbound is a real DNS-over-TLS server (Debian's unbound) on 127.0.0.1,
// serving only local data: "." is a static zone, so it never recurses.
type unbound struct {
	Addr  string // host:port of its TLS port
	Roots *x509.CertPool
}

// startUnbound runs unbound in the foreground with a certificate for
// dns.test and 127.0.0.1 from a CA the test makes; extra is added to its
// server clause. It is killed at cleanup.
func startUnbound(t testing.TB, extra string, localData ...string) *unbound {
	t.Helper()
	bin := testenv.RequireTool(t, "unbound")
	dir := t.TempDir()
	ca := certtest.NewCA(t, "unbound test CA")
	certPEM, keyPEM := ca.Issue(t, "dns.test", true, certtest.DNSNames("dns.test"))
	certFile, keyFile := certtest.WritePair(t, dir, certPEM, keyPEM)
	addr := testenv.FreeAddr(t)
	host, port, _ := net.SplitHostPort(addr)
	var data strings.Builder
	for _, rr := range localData {
		fmt.Fprintf(&data, "  local-data: %q\n", rr)
	}
	conf := fmt.Sprintf(`server:
  verbosity: 1
  interface: %[1]s@%[2]s
  port: %[2]s
  tls-port: %[2]s
  tls-service-key: %[3]q
  tls-service-pem: %[4]q
  do-ip6: no
  do-udp: no
  chroot: ""
  username: ""
  directory: %[5]q
  pidfile: ""
  use-syslog: no
  logfile: ""
  num-threads: 1
  module-config: "iterator"
  local-zone: "." static
%[6]s%[7]s
remote-control:
  control-enable: no
`, host, port, keyFile, certFile, dir, extra, data.String())
	confFile := filepath.Join(dir, "unbound.conf")
	if err := os.WriteFile(confFile, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	var out testenv.Buffer
	cmd := exec.Command(bin, "-d", "-c", confFile)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start unbound: %v", err)
	}
	exited := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { _ = cmd.Wait(); close(exited) })
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		wg.Wait()
		if t.Failed() {
			t.Logf("unbound output:\n%s", out.String())
		}
	})
	// Ready when its TLS port takes connections; no wall-clock bound but
	// the test's own: a loaded machine starts it late, not never.
	for {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			break
		}
		select {
		case <-exited:
			t.Fatalf("unbound exited: %s", out.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	u := &unbound{Addr: addr, Roots: x509.NewCertPool()}
	u.Roots.AddCert(ca.Cert)
	return u
}

// TestDoTUnbound asks a real DNS-over-TLS server: answers and NXDOMAIN come
// through, concurrent queries are pipelined on one connection, and a
// connection the server closes when idle is replaced by the next query.
func TestDoTUnbound(t *testing.T) {
	u := startUnbound(t, "  tcp-idle-timeout: 300\n",
		"corp.example. 300 IN SOA ns.corp.example. admin.corp.example. 1 3600 600 86400 60",
		"a.corp.example. 300 IN A 192.0.2.1")
	r, _ := newTestResolver(t, Config{
		Upstreams:      []string{"tls://" + u.Addr + "@dns.test"},
		TLS:            &tls.Config{RootCAs: u.Roots},
		CacheSize:      -1,
		Timeout:        time.Minute,
		TLSIdleTimeout: time.Minute, // unbound closes first
	})
	m, _ := ask(t, r, "A.corp.example.", dns.TypeA)
	if len(m.Answer) != 1 || m.Answer[0].(*dns.A).A.String() != "192.0.2.1" {
		t.Fatalf("answer %v, want 192.0.2.1", m.Answer)
	}
	if m, _ := ask(t, r, "nope.corp.example.", dns.TypeA); m.Rcode != dns.RcodeNameError {
		t.Errorf("rcode %s, want NXDOMAIN", dns.RcodeToString[m.Rcode])
	}

	const n = 20
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			// Different questions, so nothing is coalesced.
			b, _, err := r.AppendReply(t.Context(), nil, qwire(t, fmt.Sprintf("x%d.corp.example.", i), dns.TypeA))
			if err != nil {
				errs <- err
				return
			}
			m := new(dns.Msg)
			if err := m.Unpack(b); err != nil || m.Rcode != dns.RcodeNameError {
				errs <- fmt.Errorf("x%d: %v rcode %d", i, err, m.Rcode)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if c := r.ups[0].dot.openConns(); c > 1 {
		t.Errorf("%d connections open after %d concurrent queries, want them pipelined on 1", c, n)
	}

	// unbound closes the idle connection after 300ms; the next query opens
	// another.
	for r.ups[0].dot.openConns() > 0 {
		time.Sleep(10 * time.Millisecond)
	}
	if m, _ := ask(t, r, "a.corp.example.", dns.TypeA); len(m.Answer) != 1 {
		t.Errorf("after the server's idle close: answer %v", m.Answer)
	}
	if n := errCount(r, 0, kindNetwork) + errCount(r, 0, kindTimeout) + errCount(r, 0, kindTLS); n != 0 {
		t.Errorf("%v failed tries, want none", n)
	}
}
