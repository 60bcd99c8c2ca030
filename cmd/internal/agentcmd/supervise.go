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

	"github.com/meshdns/meshdns/agent"
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
// redirect, waiting for the client's timeout. When the agent cannot stay
// up (safeModeCrashes quick crashes in a row) the supervisor serves the
// sockets itself in safe mode between tries (supervisesafe.go). SIGTERM
// and SIGINT are passed to the agent, which drains; the supervisor then
// exits with it.
func supervise(ctx context.Context, args []string, cfg agent.Config, stderr io.Writer) error {
	log := slog.New(slog.NewTextHandler(stderr, nil)).With("component", "supervisor")
	if len(cfg.DNSAddrs) == 0 {
		cfg.DNSAddrs = []string{"127.0.0.1:15053"}
	}
	socks, err := proxy.ListenSockets(cfg.DNSAddrs, runtime.GOMAXPROCS(0))
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
	safe, err := newSafeMode(cfg, files, log)
	if err != nil {
		return fmt.Errorf("supervisor: %w", err)
	}
	defer safe.Close()
	var crashes crashLoop
	for {
		// Hand the sockets and the probe address back before the agent
		// starts: it takes them as it comes up.
		safe.Leave()
		start := time.Now()
		cmd, done, err := startAgent(self, args, files, stderr)
		if err != nil {
			return err
		}
		log.Info("agent started", "pid", cmd.Process.Pid)
		if stop, err := waitAgent(ctx, cmd, done, safe); stop {
			return err
		}
		err = <-done
		if err == nil {
			return nil // a clean exit is the agent's decision
		}
		if ctx.Err() != nil {
			return nil
		}
		status := err.Error()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			status = ee.String()
		}
		backoff := crashes.crashed(time.Since(start))
		log.Error("agent died; restarting it on the same sockets", "status", status, "after", backoff)
		if crashes.safeMode() {
			safe.Enter(fmt.Sprintf("the agent crashed %d times in a row within %s of its start (last: %s)",
				crashes.quick, quickCrash, status))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
	}
}

// startAgent starts the agent on the sockets' files; done receives its
// end.
func startAgent(self string, args []string, files []*os.File, stderr io.Writer) (*exec.Cmd, chan error, error) {
	cmd := exec.Command(self, append([]string{"agent"}, args...)...)
	cmd.Stdout, cmd.Stderr = os.Stdout, stderr
	cmd.ExtraFiles = files
	cmd.Env = append(os.Environ(), inheritedFDsEnv+"="+strconv.Itoa(len(files)))
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("supervisor: start agent: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	return cmd, done, nil
}

// waitAgent waits for the agent to die (its error then waits on done) or
// for ctx, then SIGTERMs it and returns stop with its error. In safe
// mode an agent that lives quickCrash ends safe mode.
func waitAgent(ctx context.Context, cmd *exec.Cmd, done chan error, safe *supervisorSafe) (bool, error) {
	var settled <-chan time.Time
	if safe.On() {
		t := time.NewTimer(quickCrash)
		defer t.Stop()
		settled = t.C
	}
	for {
		select {
		case <-ctx.Done():
			_ = cmd.Process.Signal(syscall.SIGTERM)
			return true, <-done
		case <-settled:
			safe.Recovered()
			settled = nil
		case err := <-done:
			done <- err
			return false, nil
		}
	}
}

// quickCrash is how soon after its start an agent's death counts as a
// crash loop: the agent is restarted at once after a longer run.
const quickCrash = 10 * time.Second

// safeModeCrashes quick crashes in a row put the pod in safe mode: one is
// an accident (an OOM kill, a bug on one input) the next agent survives;
// three in a row, about a second apart, is an agent that cannot stay up
// (a bad image, a crash on start-up or on the state it restores).
const safeModeCrashes = 3

// crashLoop counts the agent's quick crashes in a row and sizes the wait
// before the next try.
type crashLoop struct {
	quick   int
	backoff time.Duration
}

// crashed notes a death after the agent ran for ran and returns the wait
// before the next try: none after a long run; a crash loop backs off from
// 100ms up to 5s, and up to 30s in safe mode (the pod is served meanwhile,
// and each try may take the queries it read down with it).
func (c *crashLoop) crashed(ran time.Duration) time.Duration {
	if ran > quickCrash {
		c.quick, c.backoff = 0, 0
		return 0
	}
	c.quick++
	limit := 5 * time.Second
	if c.safeMode() {
		limit = 30 * time.Second
	}
	c.backoff = min(max(2*c.backoff, 100*time.Millisecond), limit)
	return c.backoff
}

// safeMode reports whether the crash loop calls for safe mode.
func (c *crashLoop) safeMode() bool { return c.quick >= safeModeCrashes }
