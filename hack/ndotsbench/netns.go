package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Addresses of the two ends of the veth: 192.0.2.0/24 is TEST-NET-1
// (RFC 5737), never routed anywhere, and exists only inside the two
// namespaces, which have no other link.
const (
	dnsIP = "192.0.2.1"
	podIP = "192.0.2.2"
)

// topology is the pod namespace and the cluster DNS namespace one veth hop
// away, both created by this run and named after its PID.
type topology struct {
	pod, dns string // namespace names
	resolv   string // /etc/netns/<pod>/resolv.conf, bind-mounted by ip netns exec
}

func newTopology() topology {
	pid := os.Getpid()
	pod := fmt.Sprintf("ndots-pod-%d", pid)
	return topology{
		pod:    pod,
		dns:    fmt.Sprintf("ndots-dns-%d", pid),
		resolv: filepath.Join("/etc/netns", pod, "resolv.conf"),
	}
}

// setUp creates both namespaces and the veth between them.
func (tp topology) setUp(ctx context.Context) error {
	pid := os.Getpid()
	vp, vd := fmt.Sprintf("ndp%d", pid), fmt.Sprintf("ndd%d", pid)
	steps := [][]string{
		{"ip", "netns", "add", tp.pod},
		{"ip", "netns", "add", tp.dns},
		{"ip", "link", "add", vp, "netns", tp.pod, "type", "veth", "peer", "name", vd, "netns", tp.dns},
		{"ip", "-n", tp.pod, "addr", "add", podIP + "/30", "dev", vp},
		{"ip", "-n", tp.dns, "addr", "add", dnsIP + "/30", "dev", vd},
		{"ip", "-n", tp.pod, "link", "set", "lo", "up"},
		{"ip", "-n", tp.dns, "link", "set", "lo", "up"},
		{"ip", "-n", tp.pod, "link", "set", vp, "up"},
		{"ip", "-n", tp.dns, "link", "set", vd, "up"},
	}
	for _, s := range steps {
		if err := command(ctx, s...); err != nil {
			return err
		}
	}
	return os.MkdirAll(filepath.Dir(tp.resolv), 0o755)
}

// tearDown deletes what setUp made (the veth goes with its namespaces);
// it is safe on a partial setUp and reports the first failure.
func (tp topology) tearDown() error {
	var first error
	for _, ns := range []string{tp.pod, tp.dns} {
		if err := command(context.Background(), "ip", "netns", "del", ns); err != nil && first == nil && exists("/run/netns/"+ns) {
			first = err
		}
	}
	if err := os.RemoveAll(filepath.Dir(tp.resolv)); err != nil && first == nil {
		first = fmt.Errorf("remove %s: %w", filepath.Dir(tp.resolv), err)
	}
	return first
}

// writeResolv sets the pod's resolv.conf: the Kubernetes one of a pod in
// namespace demo, with nameserver.
func (tp topology) writeResolv(nameserver string) error {
	return os.WriteFile(tp.resolv, []byte(resolvConf(nameserver)), 0o644)
}

func resolvConf(nameserver string) string {
	return "nameserver " + nameserver + "\nsearch demo.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n"
}

// inPod is the command line running argv in the pod namespace.
func (tp topology) inPod(argv ...string) []string {
	return append([]string{"ip", "netns", "exec", tp.pod}, argv...)
}

func (tp topology) inDNS(argv ...string) []string {
	return append([]string{"ip", "netns", "exec", tp.dns}, argv...)
}

func command(ctx context.Context, argv ...string) error {
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
