package agent

import (
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

// hostsChildEnv holds, in the child of TestAdminLocalhostIgnoresHosts,
// the hosts file to mount over /etc/hosts.
const hostsChildEnv = "MESHDNS_TEST_HOSTS_FILE"

// --admin-addr localhost:PORT listens on 127.0.0.1 even where /etc/hosts
// says localhost is 192.0.2.2: the child runs in a private mount
// namespace (only it sees the hosts file), so the machine's is untouched.
func TestAdminLocalhostIgnoresHosts(t *testing.T) {
	if hosts := os.Getenv(hostsChildEnv); hosts != "" {
		adminOnLocalhost(t, hosts)
		return
	}
	testenv.RequireRoot(t)
	hosts := writeFile(t, t.TempDir(), "hosts", "192.0.2.2 localhost\n")
	cmd := exec.Command(os.Args[0], "-test.run=^TestAdminLocalhostIgnoresHosts$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), hostsChildEnv+"="+hosts)
	// Go makes the new namespace's mounts private before exec, so the
	// child's bind mount never reaches the machine's.
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestAdminLocalhostIgnoresHosts") {
		t.Fatalf("child: %v\n%s", err, out)
	}
}

func adminOnLocalhost(t *testing.T, hosts string) {
	if err := syscall.Mount(hosts, "/etc/hosts", "", syscall.MS_BIND, ""); err != nil {
		t.Fatalf("bind %s over /etc/hosts: %v", hosts, err)
	}
	if addrs, err := net.LookupHost("localhost"); err != nil || !slices.Contains(addrs, "192.0.2.2") {
		t.Fatalf("localhost resolves to %v (%v) here, want 192.0.2.2 from the test's hosts file", addrs, err)
	}
	a := startAgent(t, Config{AdminAddr: "localhost:0"})
	addr := a.AdminAddr().(*net.TCPAddr)
	if !addr.IP.Equal(net.IPv4(127, 0, 0, 1)) {
		t.Fatalf("admin listens on %s, want 127.0.0.1", addr)
	}
	if code, body := testenv.HTTP(t, "GET", a.admin+"/healthz/live", "localhost", nil, ""); code != 200 {
		t.Errorf("GET /healthz/live as localhost: %d %q", code, body)
	}
}
