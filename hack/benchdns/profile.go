package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
)

// profileAgents records, for each scenario and agent of -ab, one perf
// profile (call graphs, kernel and user) over one run at full speed, into
// cfg.profile/<scenario>-agent<k>.data: where the CPU per query goes, and
// what one build does per query that the other does not. Read with
// `perf report -i FILE --no-children`; Go symbols need a binary built
// without -s -w. Done before the measured rounds, which it would slow.
func profileAgents(cfg *runConfig, agents []*child, scs []scenario, files []string) error {
	perf, err := exec.LookPath("perf")
	if err != nil {
		return fmt.Errorf("-profile needs perf: %w", err)
	}
	if err := os.MkdirAll(cfg.profile, 0o755); err != nil {
		return err
	}
	for i, sc := range scs {
		for k, a := range agents {
			out := filepath.Join(cfg.profile, fmt.Sprintf("%s-agent%d.data", sc.name, k))
			rec := exec.Command(perf, "record", "-q", "-g", "-o", out, "-p", strconv.Itoa(a.cmd.Process.Pid))
			rec.Stderr = os.Stderr
			if err := rec.Start(); err != nil {
				return fmt.Errorf("perf record: %w", err)
			}
			_, err := measure(cfg, a, files[i], cfg.duration, 0)
			_ = rec.Process.Signal(syscall.SIGINT)
			werr := rec.Wait()
			if err != nil {
				return fmt.Errorf("%s on %s: %w", sc.name, cfg.ab[k], err)
			}
			var exit *exec.ExitError
			if errors.As(werr, &exit) && exit.Sys().(syscall.WaitStatus).Signal() == syscall.SIGINT {
				werr = nil // perf ends by the signal it was asked to stop with
			}
			if werr != nil {
				return fmt.Errorf("perf record for %s: %w", out, werr)
			}
			fmt.Printf("# profile %s\n", out)
		}
	}
	return nil
}
