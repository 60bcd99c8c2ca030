package cni

import (
	"context"
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"

	"github.com/meshdns/meshdns/iptables"
)

// NetNSRunner runs the iptables binaries of the node inside the network
// namespace at Path (CNI_NETNS). The pod's image is never involved: the
// plugin runs on the node, so the node's iptables tools are used.
type NetNSRunner struct {
	Path string
	// Exec runs the command once in the namespace; nil means
	// iptables.ExecRunner{}.
	Exec iptables.Runner
}

var _ iptables.Runner = NetNSRunner{}

// Run implements iptables.Runner. A child process inherits the network
// namespace of the thread that forks it, so the goroutine is locked to its
// thread, the thread enters the namespace for the fork and goes back.
func (r NetNSRunner) Run(ctx context.Context, stdin []byte, name string, args ...string) ([]byte, error) {
	ex := r.Exec
	if ex == nil {
		ex = iptables.ExecRunner{}
	}
	target, err := os.Open(r.Path)
	if err != nil {
		return nil, fmt.Errorf("open network namespace: %w", err)
	}
	defer target.Close()
	runtime.LockOSThread()
	orig, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("open own network namespace: %w", err)
	}
	defer orig.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("enter network namespace %s: %w", r.Path, err)
	}
	out, runErr := ex.Run(ctx, stdin, name, args...)
	if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
		// The thread stays in the pod's namespace: keep it locked, so it
		// ends with this goroutine instead of serving others.
		return out, fmt.Errorf("leave network namespace %s: %w", r.Path, err)
	}
	runtime.UnlockOSThread()
	return out, runErr
}
