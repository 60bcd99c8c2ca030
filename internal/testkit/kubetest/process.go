package kubetest

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"
)

// Process is one child (etcd, kube-apiserver, or another harness's
// containerd and kubelet) with its output in a file.
type Process struct {
	name string
	cmd  *exec.Cmd
	log  string        // path of the combined stdout+stderr
	done chan struct{} // closed when the process has exited
	err  error         // exit status; valid once done is closed
}

// StartProcess runs bin with args, its output in logPath. The child dies
// with the test binary (Pdeathsig).
func StartProcess(name, bin, logPath string, args []string) (*Process, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout = f
	cmd.Stderr = f
	// Pdeathsig: when the test binary dies (panic, timeout, kill -9), the
	// kernel kills the child too, so no etcd outlives a crashed test run.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Process{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// Exited reports whether the process has ended.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Stop sends SIGTERM to this process (by PID), then SIGKILL after grace.
func (p *Process) Stop(grace time.Duration) {
	if p == nil || p.Exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// Tail returns the last n bytes of the process log, for failure messages.
func (p *Process) Tail(n int) string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return err.Error()
	}
	if len(b) > n {
		b = b[len(b)-n:]
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return string(b)
}

// freePorts returns n distinct TCP ports on 127.0.0.1 that were free a
// moment ago. Another process may take one before the child binds it; the
// callers retry the whole start in that case.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func loopbackURL(scheme string, port int) string {
	return scheme + "://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

// Pid is the child's process ID.
func (p *Process) Pid() int { return p.cmd.Process.Pid }
