package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meshdns/meshdns/internal/archtest"
	"github.com/meshdns/meshdns/internal/testkit/buildtest"
	"github.com/meshdns/meshdns/internal/testkit/netnstest"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

// cmdTimeout bounds every command the tests run.
const cmdTimeout = 30 * time.Second

// workDir returns a directory every user can read and traverse, for the
// binaries and files the agent (running as agentUID) must open; t.TempDir
// is private to root. Removed when the test ends.
func workDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "meshdns-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// meshdnsBuild is cmd/meshdns, built once for all the tests; TestMain
// removes it.
var meshdnsBuild = &buildtest.Binary{Pkg: "github.com/meshdns/meshdns/cmd/meshdns"}

// agentBuild is the sidecar's binary, cmd/meshdns-agent, as the Makefile
// makes bin/meshdns-agent: the injected agent container runs it.
var agentBuild = &buildtest.Binary{
	Pkg: archtest.AgentMain,
	Env: []string{"CGO_ENABLED=0"},
}

// buildMeshdns returns the path of cmd/meshdns, built on first use into a
// world-readable directory.
func buildMeshdns(t testing.TB) string { return meshdnsBuild.Path(t) }

// topology is a "cluster DNS" namespace and a "pod" namespace joined by a
// veth pair, with a DNS server in the first and a pod resolv.conf for the
// second.
type topology struct {
	cluster string // netns name of the cluster DNS side
	pod     string // netns name of the pod side
	dir     string // world-readable work directory
	self    string // copy of the test binary in dir
	queries *queryLog
}

// podResolvConf is the pod's /etc/resolv.conf, as the kubelet writes it
// for a pod in namespace demo with ClusterFirst DNS on a node whose own
// search domain is corp.example.com.
var podResolvConf = "nameserver " + upstreamIP + "\n" +
	"search demo.svc.cluster.local svc.cluster.local cluster.local corp.example.com\n" +
	"options ndots:5\n"

// newTopology builds the namespaces, the link, the pod's /etc/netns files
// and starts the upstream DNS helper. Everything is undone in t.Cleanup.
func newTopology(t *testing.T) *topology {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.RequireTool(t, "ip")
	tp := &topology{cluster: netnstest.New(t, "mde-dns"), pod: netnstest.New(t, "mde-pod"), dir: workDir(t)}
	tp.self = netnstest.CopyTestBinary(t, tp.dir)
	netnstest.Veth(t, tp.cluster, upstreamIP+"/24", tp.pod, podIP+"/24")

	// ip netns exec bind-mounts /etc/netns/NAME/* over /etc/*, so every
	// command the test runs in the pod sees the pod's resolver files.
	etc := filepath.Join("/etc/netns", tp.pod)
	if err := os.MkdirAll(etc, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(etc) })
	files := map[string]string{
		"resolv.conf":   podResolvConf,
		"nsswitch.conf": "hosts: files dns\n",
		"hosts":         "127.0.0.1 localhost\n::1 localhost\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(etc, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	cmd := exec.Command("ip", "netns", "exec", tp.cluster, tp.self)
	cmd.Env = append(os.Environ(), roleEnv+"=upstream")
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stop(cmd) })
	tp.queries = newQueryLog(t, stdout)
	select {
	case <-tp.queries.ready:
	case <-time.After(cmdTimeout):
		t.Fatal("upstream DNS helper did not start")
	}
	return tp
}

// stop ends a process the test started: SIGTERM, then SIGKILL after 5s.
func stop(cmd *exec.Cmd) {
	if cmd.Process == nil || cmd.ProcessState != nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// run runs a command and fails the test when it fails.
func run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := tryRun(nil, name, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func runCleanup(t testing.TB, name string, args ...string) {
	t.Helper()
	if _, err := tryRun(nil, name, args...); err != nil {
		t.Errorf("cleanup: %v", err)
	}
}

// tryRun runs a command with extra environment variables and returns its
// stdout; the error carries stderr.
func tryRun(env []string, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %w: %s%s", name, strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String(), nil
}

// inPod runs a command inside the pod namespace.
func (tp *topology) inPod(env []string, name string, args ...string) (string, error) {
	return tryRun(env, "ip", append([]string{"netns", "exec", tp.pod, name}, args...)...)
}

// startInPod starts a long-running process in the pod namespace as uid
// and gid id, with its output in a log file that is printed if the test
// fails. The process is stopped at the end of the test.
func (tp *topology) startInPod(t testing.TB, id int, logName string, env []string, name string, args ...string) *exec.Cmd {
	t.Helper()
	testenv.RequireTool(t, "setpriv")
	argv := []string{"netns", "exec", tp.pod, "setpriv",
		"--reuid", fmt.Sprint(id), "--regid", fmt.Sprint(id), "--clear-groups", name}
	cmd := exec.Command("ip", append(argv, args...)...)
	cmd.Env = append(os.Environ(), env...)
	logPath := filepath.Join(tp.dir, logName)
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stop(cmd)
		f.Close()
		if t.Failed() {
			data, _ := os.ReadFile(logPath)
			t.Logf("%s:\n%s", logName, tail(data, 4000))
		}
	})
	return cmd
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

var saveNoise = regexp.MustCompile(`\[\d+:\d+\]`)

// save returns the pod's rules of both families as the backend's save
// tools print them, without comment lines and counters.
func (tp *topology) save(t testing.TB, backend string) string {
	t.Helper()
	var b strings.Builder
	for _, tool := range []string{"iptables-" + backend + "-save", "ip6tables-" + backend + "-save"} {
		out, err := tp.inPod(nil, tool)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(out, "\n") {
			if line != "" && !strings.HasPrefix(line, "#") {
				b.WriteString(tool + " " + saveNoise.ReplaceAllString(line, "[0:0]") + "\n")
			}
		}
	}
	return b.String()
}
