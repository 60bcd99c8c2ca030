package main

import (
	"context"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/cmd/internal/cli"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

// TestAgentQueryLogFromControlPlane runs a control plane with
// --agent-query-log nxdomain and a real agent with no query log flag of its
// own: the NXDOMAIN its pod gets is logged, because the control plane's
// settings turned the class on.
func TestAgentQueryLogFromControlPlane(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	run := func(name string, stderr io.Writer, args ...string) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if code := cli.Run(ctx, args, io.Discard, stderr); code != 0 {
				t.Errorf("%s exited with %d", name, code)
			}
		}()
	}
	grpcAddr, cpAdmin, dnsAddr, agentAdmin := testenv.FreeAddr(t), testenv.FreeAddr(t), testenv.FreeAddr(t), testenv.FreeAddr(t)
	run("controlplane", io.Discard, "controlplane", "--insecure-allow-unauthenticated", "--entries", "../../examples/entries",
		"--grpc-addr", grpcAddr, "--admin-addr", cpAdmin, "--debounce", "10ms", "--log-level", "error",
		"--agent-query-log", "nxdomain", "--agent-query-log-rate", "1000")
	var agentLog testenv.Buffer
	run("agent", &agentLog, "agent", "--control-plane", grpcAddr, "--namespace", "team-a", "--pod-name", "web-0",
		"--resolv-conf", "../../examples/resolv.conf", "--upstream", "127.0.0.1", "--dns-addr", dnsAddr,
		"--admin-addr", agentAdmin, "--log-level", "error")

	// Once the table (and with it the settings) is in, every NXDOMAIN is
	// logged; ask until the first line shows, then check its fields.
	c := &dns.Client{Timeout: 5 * time.Second}
	testenv.Eventually(t, "a query log line for the NXDOMAIN", time.Minute, func() bool {
		m := new(dns.Msg)
		m.SetQuestion("nope.corp.example.", dns.TypeA)
		if r, _, err := c.Exchange(m, dnsAddr); err != nil || r.Rcode != dns.RcodeNameError {
			return false
		}
		return strings.Contains(agentLog.String(), `"qname":"nope.corp.example."`)
	})
	for _, l := range strings.Split(agentLog.String(), "\n") {
		if strings.Contains(l, `"qname":"nope.corp.example."`) &&
			(!strings.Contains(l, `"rcode":"NXDOMAIN"`) || !strings.Contains(l, `"pod":"web-0"`)) {
			t.Errorf("query log line without the rcode or the pod: %s", l)
		}
	}
}
