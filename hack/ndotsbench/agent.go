package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// agent is meshdns's agent running in the pod namespace on 127.0.0.1:53,
// the pod's nameserver, forwarding what its table does not own to the
// cluster DNS.
type agent struct {
	cmd *exec.Cmd
	log string // its stderr, kept for a failure's message
}

// startAgent runs binary's agent on table with the pod's search list; a
// negative cacheSize turns its cache off.
func startAgent(ctx context.Context, tp topology, binary, table, dir string, cacheSize int) (*agent, error) {
	upstreams := filepath.Join(dir, "agent-resolv.conf")
	if err := os.WriteFile(upstreams, []byte(resolvConf(dnsIP)), 0o644); err != nil {
		return nil, fmt.Errorf("write the agent's resolv.conf: %w", err)
	}
	logPath := filepath.Join(dir, fmt.Sprintf("agent-cache%d.log", cacheSize))
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("create agent log: %w", err)
	}
	defer logFile.Close()
	argv := tp.inPod(binary, "agent", "--nametable-file", table, "--namespace", "demo",
		"--resolv-conf", upstreams, "--dns-addr", "127.0.0.1:53", "--admin-addr", "-",
		"--cache-size", fmt.Sprint(cacheSize))
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start agent: %w", err)
	}
	a := &agent{cmd: cmd, log: logPath}
	if err := a.waitReady(ctx, tp); err != nil {
		a.stop()
		return nil, err
	}
	return a, nil
}

// waitReady asks the agent for a name of its table until it answers from
// it: it is then listening and has its table.
func (a *agent) waitReady(ctx context.Context, tp topology) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	argv := tp.inPod("dig", "+short", "+tries=1", "+time=1", "@127.0.0.1", "web.demo.svc.cluster.local", "A")
	for {
		out, _ := exec.CommandContext(ctx, argv[0], argv[1:]...).Output()
		if strings.TrimSpace(string(out)) == "10.96.0.20" {
			return nil
		}
		select {
		case <-ctx.Done():
			log, _ := os.ReadFile(a.log)
			return fmt.Errorf("agent not answering web.demo.svc.cluster.local: %w; its log:\n%s", ctx.Err(), log)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// stop kills the agent by its PID (ip netns exec execs it in place).
func (a *agent) stop() {
	_ = a.cmd.Process.Kill()
	_ = a.cmd.Wait()
}
