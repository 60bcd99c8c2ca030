package agentcmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"github.com/meshdns/meshdns/pkg/proxy"
)

// inheritedFDsEnv tells a supervised agent how many DNS sockets it
// inherited, as descriptors 3, 4, ... (UDP ones first).
const inheritedFDsEnv = "MESHDNS_INHERITED_FDS"

// cutSupervise removes --supervise from args and reports whether it is on:
// the supervisor passes the rest to each agent it starts. The last one
// wins, as for every other flag, so an injected --supervise=false (the
// template's agentArgs) turns off the generated --supervise.
func cutSupervise(args []string) ([]string, bool) {
	var out []string
	found := false
	for _, a := range args {
		switch a {
		case "--supervise", "-supervise", "--supervise=true", "-supervise=true":
			found = true
		case "--supervise=false", "-supervise=false":
			found = false
		default:
			out = append(out, a)
		}
	}
	return out, found
}

// inheritedSockets returns the DNS sockets a supervisor handed down, or nil
// when the agent was not started by one.
func inheritedSockets() (*proxy.Sockets, error) {
	v := os.Getenv(inheritedFDsEnv)
	if v == "" {
		return nil, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 256 {
		return nil, fmt.Errorf("%s=%q: want a count of descriptors", inheritedFDsEnv, v)
	}
	files := make([]*os.File, n)
	for i := range files {
		files[i] = os.NewFile(uintptr(3+i), "dns-socket-"+strconv.Itoa(i))
	}
	return proxy.SocketsFromFiles(files)
}

// supervise binds the agent's DNS sockets and runs the agent as a child
// process on them, starting it again when it dies other than by a clean
// exit: the sockets outlive a crash or an OOM kill of the agent (the
// largest process), so queries sent meanwhile wait in the socket queue for
// the restarted agent instead of being refused or, behind the pod's
// redirect, waiting for the client's timeout. SIGTERM and SIGINT are passed
// to the agent, which drains; the supervisor then exits with it.
func supervise(ctx context.Context, args, dnsAddrs []string, stderr io.Writer) error {
	log := slog.New(slog.NewTextHandler(stderr, nil)).With("component", "supervisor")
	if len(dnsAddrs) == 0 {
		dnsAddrs = []string{"127.0.0.1:15053"}
	}
	socks, err := proxy.ListenSockets(dnsAddrs, runtime.GOMAXPROCS(0))
	if err != nil {
		return fmt.Errorf("supervisor: %w", err)
	}
	defer socks.Close()
	files, err := socks.Files()
	if err != nil {
		return fmt.Errorf("supervisor: %w", err)
	}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("supervisor: %w", err)
	}
	backoff := time.Duration(0)
	for {
		cmd := exec.Command(self, append([]string{"agent"}, args...)...)
		cmd.Stdout, cmd.Stderr = os.Stdout, stderr
		cmd.ExtraFiles = files
		cmd.Env = append(os.Environ(), inheritedFDsEnv+"="+strconv.Itoa(len(files)))
		start := time.Now()
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("supervisor: start agent: %w", err)
		}
		log.Info("agent started", "pid", cmd.Process.Pid)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-ctx.Done():
			_ = cmd.Process.Signal(syscall.SIGTERM)
			return <-done
		case err = <-done:
		}
		if err == nil {
			return nil // a clean exit is the agent's decision
		}
		if ctx.Err() != nil {
			return nil
		}
		// At once after a crash; a crash loop backs off up to 5s.
		if time.Since(start) > 10*time.Second {
			backoff = 0
		} else {
			backoff = min(max(2*backoff, 100*time.Millisecond), 5*time.Second)
		}
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			log.Error("agent died; restarting it on the same sockets", "status", ee.String(), "after", backoff)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
	}
}
