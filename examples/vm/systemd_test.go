package vm_test

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

// systemdVM is a fake VM for the systemd path of the scripts: a
// systemctl on PATH that records its arguments, and the unit and defaults
// files in a temporary directory.
type systemdVM struct {
	vmDir
	dir, systemctlLog, binary string
	env                       []string
}

func newSystemdVM(t *testing.T, listen string) systemdVM {
	t.Helper()
	v := systemdVM{vmDir: newVMDir(t), dir: t.TempDir()}
	bin := filepath.Join(v.dir, "bin")
	for _, d := range []string{bin, filepath.Join(v.dir, "systemd"), filepath.Join(v.dir, "default")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	v.systemctlLog = filepath.Join(v.dir, "systemctl.log")
	fake := "#!/bin/sh\necho \"$*\" >>" + v.systemctlLog + "\n"
	if err := os.WriteFile(filepath.Join(bin, "systemctl"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	v.binary = filepath.Join(v.dir, "opt", "meshdns")
	if err := os.MkdirAll(filepath.Dir(v.binary), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(v.binary, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	v.env = []string{
		"PATH=" + bin + ":" + os.Getenv("PATH"),
		"RESOLV_CONF=" + v.resolv, "STATE_DIR=" + v.state,
		"SYSTEMD_DIR=" + filepath.Join(v.dir, "systemd"),
		"DEFAULTS_FILE=" + filepath.Join(v.dir, "default", "meshdns-agent"),
		"LISTEN_ADDR=" + listen, "AGENT_WAIT_SECONDS=1",
	}
	return v
}

func (v systemdVM) run(t *testing.T, script string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("bash", append([]string{script}, args...)...)
	cmd.Env = append(os.Environ(), v.env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestSetupSystemd runs the install path: unit and defaults written, the
// unit started, resolv.conf switched only once the agent listens, and
// uninstall stopping and removing the unit.
func TestSetupSystemd(t *testing.T) {
	testenv.RequireRoot(t) // the scripts insist on root for systemd, and port 53
	const listen = "127.0.0.77"
	// The "agent": something listening where setup.sh waits for it.
	ln, err := net.Listen("tcp", listen+":53")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	v := newSystemdVM(t, listen)
	const original = "search corp.example\nnameserver 192.0.2.53\n"
	if err := os.WriteFile(v.resolv, []byte(original), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := v.run(t, "setup.sh", "--binary", v.binary, "--control-plane", "cp.example:15012", "--namespace", "vms"); err != nil {
		t.Fatalf("setup.sh: %v\n%s", err, out)
	}
	unit := read(t, filepath.Join(v.dir, "systemd", "meshdns-agent.service"))
	if !strings.Contains(unit, "ExecStart="+v.binary+" agent --dns-addr 127.0.0.1:53 ") {
		t.Errorf("unit ExecStart does not run --binary:\n%s", unit)
	}
	defaults := read(t, filepath.Join(v.dir, "default", "meshdns-agent"))
	for _, want := range []string{"MESHDNS_CONTROL_PLANE=cp.example:15012\n", "MESHDNS_NAMESPACE=vms\n", "MESHDNS_POD_NAME="} {
		if !strings.Contains(defaults, want) {
			t.Errorf("defaults file lacks %q:\n%s", want, defaults)
		}
	}
	if got := read(t, v.resolv); !strings.Contains(got, "\nnameserver "+listen+"\nsearch corp.example\n") {
		t.Errorf("resolv.conf after setup:\n%s", got)
	}
	if out, err := v.run(t, "uninstall.sh"); err != nil {
		t.Fatalf("uninstall.sh: %v\n%s", err, out)
	}
	if diff := cmp.Diff(original, read(t, v.resolv)); diff != "" {
		t.Errorf("restored (-want +got):\n%s", diff)
	}
	if _, err := os.Stat(filepath.Join(v.dir, "systemd", "meshdns-agent.service")); !os.IsNotExist(err) {
		t.Errorf("unit left after uninstall (%v)", err)
	}
	want := []string{"daemon-reload", "enable --now meshdns-agent.service", "disable --now meshdns-agent.service", "daemon-reload"}
	got := strings.Split(strings.TrimSpace(read(t, v.systemctlLog)), "\n")
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("systemctl calls (-want +got):\n%s", diff)
	}
}

// TestSetupSystemdAgentDown: when the agent does not come up, setup fails
// and resolv.conf still points at the original resolver.
func TestSetupSystemdAgentDown(t *testing.T) {
	testenv.RequireRoot(t)
	v := newSystemdVM(t, "127.0.0.78") // nothing listens there
	const original = "nameserver 192.0.2.53\n"
	if err := os.WriteFile(v.resolv, []byte(original), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := v.run(t, "setup.sh", "--binary", v.binary)
	if err == nil || !strings.Contains(out, "does not listen on 127.0.0.78:53 after 1s") {
		t.Fatalf("setup.sh: err %v, output:\n%s", err, out)
	}
	if diff := cmp.Diff(original, read(t, v.resolv)); diff != "" {
		t.Errorf("resolv.conf changed although the agent is down (-want +got):\n%s", diff)
	}
}
