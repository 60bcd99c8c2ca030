package main

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/miekg/dns"
)

// The real agent (bin/meshdns agent) on a static table file: the same
// proxy, plus the admin server, the file watcher and the table converter,
// so its RSS is the figure a sidecar user pays.

// writeTableFile writes n services in the protojson form of
// meshdns.v1.NameTable, the same services as benchEntries.
func writeTableFile(dir string, n int) (string, error) {
	entries := benchEntries(n)
	return writeLines(dir, fmt.Sprintf("nametable-%d.json", n), len(entries),
		"{\"authoritative_zones\": [\"cluster.local\"], \"table\": {", "\n}}\n",
		func(w *bufio.Writer, i int) {
			if i > 0 {
				w.WriteByte(',')
			}
			e := entries[i]
			fmt.Fprintf(w, "\n%q: {\"ips\": [%q], \"registry\": \"Kubernetes\", \"shortname\": %q, \"namespace\": %q, "+
				"\"ports\": [{\"name\": \"http\", \"port\": 80, \"protocol\": \"TCP\"}]}",
				e.Hostname, e.IPs[0].String(), e.ShortName, e.Namespace)
		})
}

// startAgent runs the agent pinned to the server cpus on a table of n services and
// waits until it answers a name from the table.
func startAgent(cfg *runConfig, n int, upstreamAddr string) (*child, error) {
	table, err := writeTableFile(cfg.dir, n)
	if err != nil {
		return nil, err
	}
	resolv := filepath.Join(cfg.dir, "resolv.conf")
	content := fmt.Sprintf("nameserver 127.0.0.1\nsearch %s.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n", podNamespace)
	if err := os.WriteFile(resolv, []byte(content), 0o644); err != nil {
		return nil, err
	}
	addr, err := freeUDPAddr()
	if err != nil {
		return nil, err
	}
	args := []string{"agent", "--dns-addr", addr, "--admin-addr", "127.0.0.1:0", "--nametable-file", table,
		"--namespace", podNamespace, "--resolv-conf", resolv, "--upstream", upstreamAddr, "--log-level", "warn"}
	return startProcess(cfg, addr, n, cfg.agent, args...)
}

// startProcess runs bin pinned to the server cpus and waits until it
// answers on addr the last name of a table of n services.
func startProcess(cfg *runConfig, addr string, n int, bin string, args ...string) (*child, error) {
	var cmd *exec.Cmd
	if cfg.taskset != "" {
		cmd = exec.Command(cfg.taskset, append([]string{"-c", cfg.serverCPU, bin}, args...)...)
	} else {
		cmd = exec.Command(bin, args...)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &child{cmd: cmd, addr: addr}
	// svc<n-1> is the last service in the file: once it answers, the
	// whole table is in.
	q := new(dns.Msg)
	q.SetQuestion(fmt.Sprintf("svc%d.ns%d.svc.cluster.local.", n-1, (n-1)%namespaces), dns.TypeA)
	client := &dns.Client{Timeout: 500 * time.Millisecond}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		r, _, err := client.Exchange(q, addr)
		if err == nil && r.Rcode == dns.RcodeSuccess && len(r.Answer) > 0 {
			return c, nil
		}
		if time.Now().After(deadline) {
			c.stop()
			return nil, fmt.Errorf("%s on %s not answering from its table after 2m (last: %v)", filepath.Base(bin), addr, errors.Join(err))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// freeUDPAddr returns a loopback address whose UDP and TCP ports were free
// a moment ago.
func freeUDPAddr() (string, error) {
	for range 100 {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			return "", err
		}
		addr := pc.LocalAddr().String()
		l, err := net.Listen("tcp", addr)
		pc.Close()
		if err != nil {
			continue
		}
		l.Close()
		return addr, nil
	}
	return "", errors.New("no free port")
}

// freeTCPAddr returns a loopback address whose TCP port was free a moment
// ago (an HTTP or gRPC address).
func freeTCPAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// agentPath returns the meshdns binary when it has an agent command.
func agentPath(p string) string {
	if p == "" {
		return ""
	}
	out, err := exec.Command(p, "help").CombinedOutput()
	if err != nil && !strings.Contains(string(out), "agent") {
		return ""
	}
	if !strings.Contains(string(out), "agent") {
		return ""
	}
	return p
}
