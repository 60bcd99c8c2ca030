package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// outsideIP is the outside name's address (TEST-NET-2, RFC 5737).
const outsideIP = "198.51.100.10"

// corefile is the cluster DNS: authoritative for cluster.local with no
// names in it (so every search-path expansion of an outside name is
// NXDOMAIN, as a real cluster's CoreDNS answers it) and for example.com
// with the outside name. The log plugin writes one line per query it
// receives: the count this benchmark reports.
func corefile(dir string) string {
	_, port, _ := strings.Cut(coreDNSAddr, ":")
	var b strings.Builder
	for _, zone := range []string{"cluster.local", "example.com"} {
		fmt.Fprintf(&b, "%s:%s {\n\tbind 127.0.0.1\n\tlog\n\tfile %s\n}\n", zone, port, filepath.Join(dir, zone+".zone"))
	}
	return b.String()
}

func zoneFile(zone string) string {
	z := fmt.Sprintf("$ORIGIN %s.\n$TTL 30\n@ IN SOA ns.%s. hostmaster.%s. 1 7200 1800 86400 30\n@ IN NS ns.%s.\nns IN A %s\n",
		zone, zone, zone, zone, dnsIP)
	if zone == "example.com" {
		z += "www IN A " + outsideIP + "\n"
	}
	return z
}

// coreDNS is a running CoreDNS and the questions its log plugin has
// written so far.
type coreDNS struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when stdout ends

	mu    sync.Mutex
	names []string // guarded by mu: the question name of each query, in log order
	seen  chan struct{}
}

// startCoreDNS runs binary in the DNS namespace on the files it writes to dir.
func startCoreDNS(tp topology, binary, dir string) (*coreDNS, error) {
	if err := os.WriteFile(filepath.Join(dir, "Corefile"), []byte(corefile(dir)), 0o644); err != nil {
		return nil, fmt.Errorf("write corefile: %w", err)
	}
	for _, zone := range []string{"cluster.local", "example.com"} {
		if err := os.WriteFile(filepath.Join(dir, zone+".zone"), []byte(zoneFile(zone)), 0o644); err != nil {
			return nil, fmt.Errorf("write zone %s: %w", zone, err)
		}
	}
	argv := tp.inDNS(binary, "-conf", filepath.Join(dir, "Corefile"))
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("coredns stdout: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start coredns: %w", err)
	}
	c := &coreDNS{cmd: cmd, done: make(chan struct{}), seen: make(chan struct{}, 1)}
	go c.read(out)
	return c, nil
}

func (c *coreDNS) read(r io.Reader) {
	defer close(c.done)
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		name, ok := queryName(sc.Text())
		if !ok {
			continue
		}
		c.mu.Lock()
		c.names = append(c.names, name)
		c.mu.Unlock()
		select {
		case c.seen <- struct{}{}:
		default:
		}
	}
}

// queryName is the question name of a log plugin line such as
// `[INFO] 192.0.2.2:40000 - 1 "A IN www.example.com. udp 44 false 512" NOERROR ...`.
func queryName(line string) (string, bool) {
	_, q, ok := strings.Cut(line, `"`)
	if !ok {
		return "", false
	}
	f := strings.Fields(q)
	if len(f) < 3 || f[1] != "IN" {
		return "", false
	}
	return f[2], true
}

// count is how many queries the log has shown so far.
func (c *coreDNS) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.names)
}

// waitFor blocks until the log shows a query for name: the log plugin
// writes a line after its answer, so a marker asked after a lookup ends
// tells that the lookup's own lines are in.
func (c *coreDNS) waitFor(ctx context.Context, name string) error {
	for {
		c.mu.Lock()
		for _, n := range c.names {
			if n == name {
				c.mu.Unlock()
				return nil
			}
		}
		c.mu.Unlock()
		select {
		case <-c.seen:
		case <-c.done:
			return fmt.Errorf("coredns exited before logging %s", name)
		case <-ctx.Done():
			return fmt.Errorf("wait for %s in the coredns log: %w", name, ctx.Err())
		}
	}
}

// stop kills CoreDNS (by its PID: ip netns exec execs it in place) and
// waits for it.
func (c *coreDNS) stop() {
	_ = c.cmd.Process.Kill()
	select {
	case <-c.done:
	case <-time.After(5 * time.Second):
	}
	_ = c.cmd.Wait()
}
