package difftest

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/internal/testkit/kubetest"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

// The test upstream's answers for names outside the cluster: both servers
// forward there, so a forwarded name gets the same answer from either.
const (
	outsideZone = "example.org."
	outsideV4   = "198.51.100.7" // TEST-NET-2
	outsideV6   = "2001:db8::7"  // documentation prefix
	upstreamTTL = 60
	// tableTTL is the TTL both servers give cluster answers: the agent's
	// default, set in the Corefile too (CoreDNS's own default is 5).
	tableTTL = 30
)

// startUpstream runs the loopback DNS server both servers forward to: A
// and AAAA for names under example.org, over UDP and TCP, NOERROR without answers for its
// other types there, NXDOMAIN for every other name. It never forwards.
func startUpstream(t testing.TB) string {
	t.Helper()
	h := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		if len(r.Question) != 1 {
			m.Rcode = dns.RcodeFormatError
			_ = w.WriteMsg(m)
			return
		}
		q := r.Question[0]
		switch {
		case !dns.IsSubDomain(outsideZone, strings.ToLower(q.Name)):
			m.Rcode = dns.RcodeNameError
		case q.Qtype == dns.TypeA:
			rr, _ := dns.NewRR(fmt.Sprintf("%s %d IN A %s", q.Name, upstreamTTL, outsideV4))
			m.Answer = append(m.Answer, rr)
		case q.Qtype == dns.TypeAAAA:
			rr, _ := dns.NewRR(fmt.Sprintf("%s %d IN AAAA %s", q.Name, upstreamTTL, outsideV6))
			m.Answer = append(m.Answer, rr)
		}
		_ = w.WriteMsg(m)
	})
	// TCP on the same port: CoreDNS forwards a question that came over
	// TCP over TCP. Another process may hold the TCP side of a free UDP
	// port: try others.
	var pc net.PacketConn
	var l net.Listener
	for range 20 {
		var err error
		if pc, err = net.ListenPacket("udp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		if l, err = net.Listen("tcp", pc.LocalAddr().String()); err == nil {
			break
		}
		pc.Close()
		pc = nil
	}
	if pc == nil {
		t.Fatal("no port free for both UDP and TCP on 127.0.0.1")
	}
	for _, srv := range []*dns.Server{{PacketConn: pc, Handler: h}, {Listener: l, Handler: h}} {
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		go func() { _ = srv.ActivateAndServe() }()
		<-started
		t.Cleanup(func() { _ = srv.Shutdown() })
	}
	return pc.LocalAddr().String()
}

// coreDNSBinary finds the CoreDNS that hack/deps.sh installs: $COREDNS, or
// coredns in ~/.cache/meshdns/coredns.
func coreDNSBinary(t testing.TB) string {
	t.Helper()
	bin := os.Getenv("COREDNS")
	if bin == "" {
		home, _ := os.UserHomeDir()
		bin = filepath.Join(home, ".cache", "meshdns", "coredns", "coredns")
	}
	if _, err := os.Stat(bin); err != nil {
		testenv.Unavailable(t, "needs CoreDNS at %s (make deps installs it)", bin)
	}
	return bin
}

// startCoreDNS runs CoreDNS with the kubernetes plugin against the test
// cluster, as a cluster's kube-dns Deployment runs it (pods insecure,
// reverse zones falling through to forward), and returns its address. It
// answers UDP and TCP on the same loopback port.
func startCoreDNS(t testing.TB, c *kubetest.Cluster, upstream string) string {
	t.Helper()
	return startCoreDNSWith(t, c, upstream, "")
}

// startCoreDNSWith is startCoreDNS with further kubernetes plugin options
// (Corefile lines).
func startCoreDNSWith(t testing.TB, c *kubetest.Cluster, upstream, options string) string {
	t.Helper()
	bin := coreDNSBinary(t)
	dir := t.TempDir()
	addr := testenv.FreeAddr(t)
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	corefile := fmt.Sprintf(`.:%s {
    bind %s
    errors
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig %s kubetest
        pods insecure
        ttl %d
        fallthrough in-addr.arpa ip6.arpa
%s    }
    forward . %s
}
`, port, host, c.Kubeconfig, tableTTL, options, upstream)
	conf := filepath.Join(dir, "Corefile")
	if err := os.WriteFile(conf, []byte(corefile), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := kubetest.StartProcess("coredns", bin, filepath.Join(dir, "coredns.log"), []string{"-conf", conf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("coredns log tail:\n%s", p.Tail(30))
		}
		p.Stop(5 * time.Second)
	})
	return addr
}
