package nodetest

import (
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// sysctls are the kernel settings the kubelet and the bridge plugin change
// on the host; Stop (or the next run's sweep) puts them back.
type sysctls map[string]string

var touchedSysctls = []string{"vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops", "net/ipv4/ip_forward"}

func readSysctls() sysctls {
	s := sysctls{}
	for _, k := range touchedSysctls {
		if b, err := os.ReadFile("/proc/sys/" + k); err == nil {
			s[k] = strings.TrimSpace(string(b))
		}
	}
	return s
}

func (s sysctls) String() string {
	var lines []string
	for k, v := range s {
		lines = append(lines, k+"="+v)
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

func (s sysctls) restore() {
	for k, v := range s {
		_ = os.WriteFile("/proc/sys/"+k, []byte(v), 0o644)
	}
}

// sweep cleans up after a node whose test binary died before Stop: its
// kubelet and containerd died with it (Pdeathsig), but the containers,
// their shims, mounts, network devices and cgroups are still there.
func sweep() {
	b, err := os.ReadFile(filepath.Join(lockDir(), stateFile))
	if err != nil {
		cleanupHost()
		return
	}
	dir, rest, _ := strings.Cut(string(b), "\n")
	saved := sysctls{}
	for _, line := range strings.Split(rest, "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			saved[k] = v
		}
	}
	killCgroups()
	killShims(dir)
	cleanup(dir, saved)
	_ = os.Remove(filepath.Join(lockDir(), stateFile))
}

// cleanup removes what a stopped node leaves: mounts under dir and the
// pods' network namespaces, the devices and rules of network, cgroups,
// the kubelet's host paths, and dir itself.
func cleanup(dir string, saved sysctls) {
	if dir != "" {
		unmountUnder(dir + "/")
	}
	cleanupHost()
	saved.restore()
	if dir != "" {
		_ = os.RemoveAll(dir)
	}
}

func cleanupHost() {
	unmountUnder("/run/netns/cni-")
	if ns, _ := filepath.Glob("/run/netns/cni-*"); len(ns) > 0 {
		for _, p := range ns {
			_ = os.Remove(p)
		}
	}
	for _, l := range []string{podBridge, nodeLink} {
		_ = exec.Command("ip", "link", "del", l).Run()
	}
	for _, ipt := range []string{"iptables", "ip6tables"} {
		// Every copy of the rule, should an earlier run have left one.
		for exec.Command(ipt, "-w", "-D", "FORWARD", "-i", podBridge, "!", "-o", podBridge, "-j", "DROP").Run() == nil {
		}
	}
	for _, top := range cgroupTops() {
		removeCgroupTree(top)
	}
	for _, p := range []string{"/var/log/pods", "/var/log/containers", "/var/lib/cni"} {
		_ = os.RemoveAll(p)
	}
}

// unmountUnder unmounts every mount point that starts with prefix,
// deepest first.
func unmountUnder(prefix string) {
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return
	}
	var points []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 1 && strings.HasPrefix(f[1], prefix) {
			points = append(points, f[1])
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(points)))
	for _, p := range points {
		if syscall.Unmount(p, 0) != nil {
			_ = syscall.Unmount(p, syscall.MNT_DETACH)
		}
	}
}

// cgroupTops lists the kubelet's pod cgroup trees in every v1 hierarchy.
func cgroupTops() []string {
	tops, _ := filepath.Glob("/sys/fs/cgroup/*/kubepods")
	return tops
}

// killCgroups SIGKILLs every process in the kubelet's pod cgroups: the
// containers of pods that were not deleted cleanly.
func killCgroups() {
	for _, top := range cgroupTops() {
		_ = filepath.WalkDir(top, func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			b, _ := os.ReadFile(p)
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
			return nil
		})
	}
}

// removeCgroupTree removes a cgroup folder and its children, deepest
// first (a cgroup folder goes with rmdir once it has no processes).
func removeCgroupTree(top string) {
	var dirs []string
	_ = filepath.WalkDir(top, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		_ = syscall.Rmdir(dirs[i])
	}
}

// killShims SIGKILLs the containerd shims serving the node in dir: they
// outlive containerd by design.
func killShims(dir string) {
	if dir == "" {
		return
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		cmd := string(b)
		if strings.Contains(cmd, "containerd-shim") && strings.Contains(cmd, dir+"/") {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
			if pid > 1 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
}
