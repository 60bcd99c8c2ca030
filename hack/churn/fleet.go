package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/meshdns/meshdns/internal/testkit/loadagent"
)

// fleetEnv, when set, makes the process a fleet process (the tool's own
// binary re-executed, or its test binary): "ADDR PKIDIR NAMESPACES", PKIDIR
// "-" for plaintext. It starts and stops agents as its standard input says
// ("+ i", "- i") and prints one line per applied response on its standard
// output (formatEvent) until its input closes.
const fleetEnv = "MESHDNS_CHURN_FLEET"

// event is one applied (and ACKed) response of one agent.
type event struct {
	agent   int
	full    bool
	seq     int // the marker's change number in a delta, -1 when it holds none
	at      time.Time
	version string
}

// formatEvent renders "E agent f|d seq unixnano version".
func formatEvent(b []byte, e loadagent.Event) []byte {
	b = append(b, "E "...)
	b = strconv.AppendInt(b, int64(e.Agent), 10)
	if e.Kind == "full" {
		b = append(b, " f "...)
	} else {
		b = append(b, " d "...)
	}
	b = strconv.AppendInt(b, int64(addrSeq(e.Watched)), 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, e.At.UnixNano(), 10)
	b = append(b, ' ')
	v := e.Version
	if v == "" {
		v = "-"
	}
	b = append(b, v...)
	return append(b, '\n')
}

func parseEvent(line string) (event, error) {
	f := strings.Fields(line)
	if len(f) != 6 || f[0] != "E" {
		return event{}, fmt.Errorf("not an event: %q", line)
	}
	agent, err1 := strconv.Atoi(f[1])
	seq, err2 := strconv.Atoi(f[3])
	ns, err3 := strconv.ParseInt(f[4], 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return event{}, fmt.Errorf("event %q: %w", line, err)
	}
	return event{agent: agent, full: f[2] == "f", seq: seq, at: time.Unix(0, ns), version: f[5]}, nil
}

// runFleet is a fleet process's body.
func runFleet(spec string, in io.Reader, out io.Writer) error {
	var addr, pkiDir string
	var namespaces int
	if _, err := fmt.Sscan(spec, &addr, &pkiDir, &namespaces); err != nil {
		return fmt.Errorf("fleet spec %q: %w", spec, err)
	}
	var p *pki
	if pkiDir != "-" {
		var err error
		if p, err = loadPKI(pkiDir); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events := make(chan loadagent.Event, 1<<14)
	var wg sync.WaitGroup
	go func() {
		defer cancel()
		agents := map[int]context.CancelFunc{}
		sc := bufio.NewScanner(in)
		for sc.Scan() {
			op, arg, _ := strings.Cut(sc.Text(), " ")
			i, err := strconv.Atoi(arg)
			if err != nil {
				continue
			}
			switch op {
			case "+":
				actx, stop := context.WithCancel(ctx)
				agents[i] = stop
				wg.Add(1)
				go func() {
					defer wg.Done()
					runAgent(actx, addr, p, i, fmt.Sprintf("ns-%d", i%max(namespaces, 1)), events)
				}()
			case "-":
				if stop, ok := agents[i]; ok {
					stop()
					delete(agents, i)
				}
			}
		}
	}()
	done := make(chan struct{})
	go func() { <-ctx.Done(); wg.Wait(); close(done) }()
	return writeEvents(events, done, out)
}

// runAgent runs agent i until ctx ends: pod pod-<i> of namespace, from a
// loopback address of its own, as a pod is.
func runAgent(ctx context.Context, addr string, p *pki, i int, namespace string, events chan<- loadagent.Event) {
	var conf *tls.Config
	if p != nil {
		var err error
		if conf, err = p.agentTLS(i, namespace); err != nil {
			fmt.Fprintln(os.Stderr, "churn fleet:", err)
			return
		}
	}
	_ = loadagent.Run(ctx, loadagent.Config{
		Addrs: []string{addr}, Namespace: namespace, Pod: fmt.Sprintf("pod-%d", i), Index: i,
		Watch: markerName, Source: loadagent.SourceAddr(i), TLS: conf,
		Report: func(e loadagent.Event) {
			select {
			case events <- e:
			case <-ctx.Done():
			}
		},
	})
}

// writeEvents writes events to out, flushed every 20ms, until done.
func writeEvents(events <-chan loadagent.Event, done <-chan struct{}, out io.Writer) error {
	bw := bufio.NewWriterSize(out, 64<<10)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var line []byte
	for {
		select {
		case e := <-events:
			line = formatEvent(line[:0], e)
			if _, err := bw.Write(line); err != nil {
				return err
			}
		case <-tick.C:
			if err := bw.Flush(); err != nil {
				return err
			}
		case <-done:
			return bw.Flush()
		}
	}
}

// fleetProc is a fleet process seen from the driver.
type fleetProc struct {
	cmd    *exec.Cmd
	mu     sync.Mutex // guards in
	in     *bufio.Writer
	closer io.Closer
	quit   chan struct{} // closed by stop: the events are no longer read
	exited chan struct{}
}

// startFleet starts a fleet process (self, re-executed with fleetEnv set)
// that sends its events to events; with nice > 0 it runs under nice(1),
// so the simulated agents yield the shared cores to the control plane,
// whose CPU is what the run measures.
func startFleet(self []string, spec string, nice int, events chan<- event, stderr io.Writer) (*fleetProc, error) {
	argv := self
	if nice > 0 {
		if path, err := exec.LookPath("nice"); err == nil {
			argv = append([]string{path, "-n", strconv.Itoa(nice)}, self...)
		}
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), fleetEnv+"="+spec)
	cmd.Stderr = stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("fleet stdin: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("fleet stdout: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start fleet: %w", err)
	}
	fp := &fleetProc{cmd: cmd, in: bufio.NewWriter(stdin), closer: stdin, quit: make(chan struct{}),
		exited: make(chan struct{})}
	go func() {
		defer close(fp.exited)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			e, err := parseEvent(sc.Text())
			if err != nil {
				continue
			}
			select {
			case events <- e:
			case <-fp.quit:
			}
		}
		_ = cmd.Wait()
	}()
	return fp, nil
}

// send writes commands ("+ i", "- i") and flushes them.
func (fp *fleetProc) send(op byte, agents ...int) error {
	fp.mu.Lock()
	defer fp.mu.Unlock()
	for _, i := range agents {
		fmt.Fprintf(fp.in, "%c %d\n", op, i)
	}
	if err := fp.in.Flush(); err != nil {
		return fmt.Errorf("command fleet: %w", err)
	}
	return nil
}

// stop closes the fleet's input (every agent ends) and waits for it,
// killing it by its PID after 10s.
func (fp *fleetProc) stop() {
	fp.mu.Lock()
	_ = fp.closer.Close()
	fp.mu.Unlock()
	close(fp.quit)
	select {
	case <-fp.exited:
	case <-time.After(10 * time.Second):
		_ = fp.cmd.Process.Kill()
		<-fp.exited
	}
}
