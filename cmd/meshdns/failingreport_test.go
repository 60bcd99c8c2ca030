package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/cmd/internal/cli"
	"github.com/meshdns/meshdns/controlplane/admin"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

// TestFailingReportReachesTop runs control planes and real agents over
// real sockets: with --failing-report all, the names an agent's pod got
// NXDOMAIN for reach the control plane's /debug/failing and meshdns top;
// with the default (off), the agent is never asked and sends nothing.
func TestFailingReportReachesTop(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	start := func(name string, args ...string) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if code := cli.Run(ctx, args, io.Discard, io.Discard); code != 0 {
				t.Errorf("%s exited with %d", name, code)
			}
		}()
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
	// stack starts a control plane with extra flags and one agent of
	// team-a/pod; it returns the control plane's admin and the agent's
	// DNS address.
	stack := func(pod string, cpFlags ...string) (cpAdmin, dnsAddr string) {
		grpcAddr, cpAdmin, dnsAddr, agentAdmin := testenv.FreeAddr(t), testenv.FreeAddr(t), testenv.FreeAddr(t), testenv.FreeAddr(t)
		start("controlplane", append([]string{"controlplane", "--insecure-allow-unauthenticated", "--entries", "../../examples/entries",
			"--grpc-addr", grpcAddr, "--admin-addr", cpAdmin, "--debounce", "10ms", "--log-level", "error"}, cpFlags...)...)
		start("agent", "agent", "--control-plane", grpcAddr, "--namespace", "team-a", "--pod-name", pod,
			"--resolv-conf", "../../examples/resolv.conf", "--upstream", "127.0.0.1", "--dns-addr", dnsAddr,
			"--admin-addr", agentAdmin, "--log-level", "error")
		synced := regexp.MustCompile(`(?m)^team-a\s+` + pod + `\s+SYNCED\s`)
		testenv.Eventually(t, pod+" SYNCED", time.Minute, func() bool {
			var out bytes.Buffer
			return cli.Run(context.Background(), []string{"status", "--admin-addr", cpAdmin}, &out, io.Discard) == 0 && synced.MatchString(out.String())
		})
		return cpAdmin, dnsAddr
	}
	nxdomain := func(addr, name string, times int) {
		t.Helper()
		c := &dns.Client{Timeout: 5 * time.Second}
		for range times {
			m := new(dns.Msg)
			m.SetQuestion(name, dns.TypeA)
			r, _, err := c.Exchange(m, addr)
			if err != nil || r.Rcode != dns.RcodeNameError {
				t.Fatalf("%s: %v %v, want NXDOMAIN", name, r, err)
			}
		}
	}
	top := func(cpAdmin string, args ...string) []admin.PodFailing {
		t.Helper()
		var out, errOut bytes.Buffer
		if code := cli.Run(context.Background(), append([]string{"top", "--admin-addr", cpAdmin, "--output", "json"}, args...), &out, &errOut); code != 0 {
			t.Fatalf("top: exit %d: %s", code, errOut.String())
		}
		var pods []admin.PodFailing
		if err := json.Unmarshal(out.Bytes(), &pods); err != nil {
			t.Fatal(err)
		}
		return pods
	}

	onAdmin, onDNS := stack("web-0", "--failing-report", "all", "--failing-report-window", "5s", "--failing-report-top-n", "3")
	offAdmin, offDNS := stack("web-1")
	nxdomain(onDNS, "nope.corp.example.", 4)
	nxdomain(onDNS, "Gone.corp.example.", 2)
	nxdomain(offDNS, "nope.corp.example.", 4)

	var pods []admin.PodFailing
	testenv.Eventually(t, "the report in meshdns top", 2*time.Minute, func() bool {
		pods = top(onAdmin, "--name", "nope.corp.example")
		return len(pods) == 1 && len(pods[0].Names) == 1 && pods[0].Names[0].Count == 4
	})
	if p := pods[0]; p.Namespace != "team-a" || p.Pod != "web-0" || p.Names[0].Rcode != "NXDOMAIN" || p.WindowSeconds < 5 {
		t.Errorf("top --name nope.corp.example: %+v", p)
	}
	all := top(onAdmin)
	if len(all) != 1 || len(all[0].Names) != 2 || all[0].Names[1].Name != "gone.corp.example." || all[0].Names[1].Count != 2 {
		t.Errorf("top: %+v, want web-0 with nope.corp.example. 4 and gone.corp.example. 2", all)
	}
	// The window a report covers is at least the configured one, longer
	// when the agent's report came late (a loaded machine).
	var table bytes.Buffer
	code := cli.Run(context.Background(), []string{"top", "--admin-addr", onAdmin}, &table, io.Discard)
	row := regexp.MustCompile(`(?m)^team-a\s+web-0\s+NXDOMAIN\s+4\s+nope\.corp\.example\.\s+(\d+)s\s`).FindStringSubmatch(table.String())
	window := -1
	if row != nil {
		window, _ = strconv.Atoi(row[1])
	}
	if code != 0 || window < 5 {
		t.Errorf("top table: exit %d, want a row of nope.corp.example. with a window of 5s or more\n%s", code, table.String())
	}

	// Off: the agent got a window's worth of time and more since its
	// queries, and the control plane holds no report of it.
	if got := top(offAdmin); len(got) != 0 {
		t.Errorf("a report without opt-in: %+v", got)
	}
	var agents bytes.Buffer
	if code := cli.Run(context.Background(), []string{"status", "--admin-addr", offAdmin, "--output", "json"}, &agents, io.Discard); code != 0 ||
		strings.Contains(agents.String(), `"failing"`) {
		t.Errorf("status of the control plane without opt-in: exit %d\n%s", code, agents.String())
	}
}

func TestFailingReportFlags(t *testing.T) {
	for _, tc := range []struct {
		name   string
		args   []string
		stderr string
	}{
		{name: "unknown mode", args: []string{"--failing-report", "some"}, stderr: `want off, namespaces or all`},
		{name: "window not in seconds", args: []string{"--failing-report", "all", "--failing-report-window", "1500ms"}, stderr: "--failing-report-window 1.5s: want whole seconds"},
		{name: "namespaces without an API server", args: []string{"--failing-report", "namespaces"}, stderr: "--failing-report namespaces reads namespace labels: give --kubeconfig"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			args := append([]string{"controlplane", "--insecure-allow-unauthenticated", "--entries", "../../examples/entries",
				"--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"}, tc.args...)
			if code := cli.Run(context.Background(), args, io.Discard, &stderr); code != 2 || !strings.Contains(stderr.String(), tc.stderr) {
				t.Errorf("exit %d, stderr %q; want 2 and %q", code, stderr.String(), tc.stderr)
			}
		})
	}
}
