package kubetest

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// ownerFile names the file in a cluster folder that holds the PID of the
// test process that made it.
const ownerFile = "owner.pid"

// claim records this process as the owner of dir.
func claim(dir string) error {
	return os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o600)
}

// sweepStale removes cluster folders under base whose owning test process
// is gone: a test binary killed by a timeout or a signal cannot run Stop,
// and on tmpfs its etcd data would hold memory until reboot. The children
// themselves die with the test process (Pdeathsig).
func sweepStale(base string) {
	dirs, _ := filepath.Glob(filepath.Join(base, "kubetest-*"))
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, ownerFile))
		if err != nil {
			continue // being created, or not ours
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		// Signal 0 checks existence; EPERM means it exists as another user.
		if err := syscall.Kill(pid, 0); err == syscall.ESRCH {
			_ = os.RemoveAll(d)
		}
	}
}
