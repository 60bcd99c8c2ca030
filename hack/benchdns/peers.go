package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// The other DNS servers of the mixed latency run, each a forwarding cache
// to the same upstream that also answers the table's services itself:
// unbound (local-data in a static cluster.local zone), dnsmasq (a hosts
// file) and CoreDNS (the hosts plugin, cache and forward). Each runs
// pinned to the server core, on its own, as the agent does.

// peerBinaries are the peers' binaries; an empty one is skipped.
type peerBinaries struct {
	unbound, dnsmasq, coredns string
}

// lookPeers resolves the peers' binaries, leaving out those not found.
func lookPeers(p peerBinaries) peerBinaries {
	look := func(name string) string {
		if name == "" {
			return ""
		}
		path, err := exec.LookPath(name)
		if err != nil {
			fmt.Printf("# %s not found: left out of the mixed latency run\n", name)
			return ""
		}
		return path
	}
	return peerBinaries{unbound: look(p.unbound), dnsmasq: look(p.dnsmasq), coredns: look(p.coredns)}
}

// defaultCoreDNS is the CoreDNS binary the test kit builds, when there is
// one, else coredns on the PATH.
func defaultCoreDNS() string {
	p := filepath.Join(os.Getenv("HOME"), ".cache/meshdns/coredns/coredns")
	if _, err := os.Stat(p); err == nil {
		return p
	}
	return "coredns"
}

// startPeers starts the peers found on a table of n services, forwarding
// to upstreamAddr, and waits until each answers from its table.
func startPeers(cfg *runConfig, p peerBinaries, n int, upstreamAddr string) ([]target, error) {
	var out []target
	stop := func() {
		for _, t := range out {
			t.c.stop()
		}
	}
	for _, s := range []struct {
		name, bin string
		args      func(dir, addr, up string, n int) ([]string, error)
	}{
		{"unbound", p.unbound, unboundArgs},
		{"dnsmasq", p.dnsmasq, dnsmasqArgs},
		{"coredns", p.coredns, corednsArgs},
	} {
		if s.bin == "" {
			continue
		}
		addr, err := freeUDPAddr()
		if err != nil {
			stop()
			return nil, err
		}
		dir := filepath.Join(cfg.dir, s.name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			stop()
			return nil, err
		}
		args, err := s.args(dir, addr, upstreamAddr, n)
		if err != nil {
			stop()
			return nil, fmt.Errorf("%s config: %w", s.name, err)
		}
		c, err := startProcess(cfg, addr, n, s.bin, args...)
		if err != nil {
			stop()
			return nil, fmt.Errorf("start %s: %w", s.name, err)
		}
		out = append(out, target{name: s.name, c: c})
	}
	return out, nil
}

// unboundArgs writes unbound's configuration: one thread, the iterator
// alone (no validation: meshdns validates nothing either), the services as
// local-data of a static zone (any other name in it is NXDOMAIN, as the
// agent answers), and everything else forwarded.
func unboundArgs(dir, addr, up string, n int) ([]string, error) {
	host, port, _ := net.SplitHostPort(addr)
	uhost, uport, _ := net.SplitHostPort(up)
	head := fmt.Sprintf(`server:
  interface: %s
  port: %s
  do-ip6: no
  num-threads: 1
  so-reuseport: no
  username: ""
  chroot: ""
  directory: %q
  pidfile: ""
  use-syslog: no
  verbosity: 0
  do-daemonize: no
  module-config: "iterator"
  access-control: 127.0.0.0/8 allow
  do-not-query-localhost: no
  local-zone: "cluster.local." static
`, host, port, dir)
	tail := fmt.Sprintf("forward-zone:\n  name: \".\"\n  forward-addr: %s@%s\n", uhost, uport)
	entries := benchEntries(n)
	conf, err := writeLines(dir, "unbound.conf", n, head, tail, func(w *bufio.Writer, i int) {
		fmt.Fprintf(w, "  local-data: \"%s. 30 IN A %s\"\n", entries[i].Hostname, entries[i].IPs[0])
	})
	return []string{"-d", "-p", "-c", conf}, err
}

// writeHosts writes the services as a hosts file.
func writeHosts(dir string, n int) (string, error) {
	entries := benchEntries(n)
	return writeLines(dir, "hosts", n, "", "", func(w *bufio.Writer, i int) {
		fmt.Fprintf(w, "%s %s\n", entries[i].IPs[0], entries[i].Hostname)
	})
}

// dnsmasqArgs runs dnsmasq on the services as a hosts file, with its
// largest cache, forwarding to up.
func dnsmasqArgs(dir, addr, up string, n int) ([]string, error) {
	hosts, err := writeHosts(dir, n)
	host, port, _ := net.SplitHostPort(addr)
	uhost, uport, _ := net.SplitHostPort(up)
	return []string{"--keep-in-foreground", "--conf-file=/dev/null", "--no-resolv", "--no-hosts",
		"--addn-hosts=" + hosts, "--listen-address=" + host, "--bind-interfaces", "--port=" + port,
		"--server=" + uhost + "#" + uport, "--cache-size=10000", "--pid-file=", "--user=root", "--group=root"}, err
}

// corednsArgs runs CoreDNS with the hosts plugin on the services, a cache
// whose minimum TTL is 0 (its default of 5s would keep the upstream's TTL 0
// answers, which the others forward every time), and forward.
func corednsArgs(dir, addr, up string, n int) ([]string, error) {
	hosts, err := writeHosts(dir, n)
	if err != nil {
		return nil, err
	}
	host, port, _ := net.SplitHostPort(addr)
	corefile := filepath.Join(dir, "Corefile")
	conf := strings.Join([]string{
		".:" + port + " {",
		"  bind " + host,
		"  hosts " + hosts + " {",
		"    fallthrough",
		"  }",
		"  cache 3600 {",
		"    success 10000 3600 0",
		"    denial 10000 300 0",
		"  }",
		"  forward . " + up,
		"}", ""}, "\n")
	return []string{"-conf", corefile, "-quiet"}, os.WriteFile(corefile, []byte(conf), 0o644)
}
