package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// controlPlane is the meshdns binary's controlplane command, run as a
// child process on loopback. The tool reads it only from outside: its
// flags, /metrics, /debug/agents and /proc.
type controlPlane struct {
	cmd         *exec.Cmd
	grpc, admin string // host:port
	http        *http.Client
	exited      chan struct{}
}

// startControlPlane starts bin on the entries folder and waits until it
// is ready (the first version built) or ready is over.
func startControlPlane(bin, entries string, p *pki, stderr io.Writer, ready time.Duration) (*controlPlane, error) {
	grpcAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	adminAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	args := []string{"controlplane", "--entries", entries, "--grpc-addr", grpcAddr, "--admin-addr", adminAddr,
		"--log-level", "warn"}
	if p != nil {
		args = append(args, "--tls-cert", filepath.Join(p.dir, "tls.crt"), "--tls-key", filepath.Join(p.dir, "tls.key"),
			"--client-ca", filepath.Join(p.dir, "ca.crt"), "--trust-domain", trustDomain)
	} else {
		args = append(args, "--insecure-allow-unauthenticated")
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = stderr, stderr
	// A control plane never outlives the tool, whatever ends it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	cp := &controlPlane{cmd: cmd, grpc: grpcAddr, admin: adminAddr, http: &http.Client{Timeout: 30 * time.Second},
		exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(cp.exited) }()
	if err := cp.waitReady(ready); err != nil {
		cp.stop()
		return nil, err
	}
	return cp, nil
}

// freeAddr is a loopback address with a port nothing listens on now.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("pick a port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func (cp *controlPlane) waitReady(bound time.Duration) error {
	deadline := time.Now().Add(bound)
	for {
		select {
		case <-cp.exited:
			return fmt.Errorf("control plane exited before it was ready: %v", cp.cmd.ProcessState)
		default:
		}
		resp, err := cp.http.Get("http://" + cp.admin + "/healthz/ready")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("control plane not ready within %v (last: %v)", bound, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// stop ends the control plane by its PID: SIGTERM, then SIGKILL after 10s.
func (cp *controlPlane) stop() {
	_ = cp.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-cp.exited:
	case <-time.After(10 * time.Second):
		_ = cp.cmd.Process.Kill()
		<-cp.exited
	}
}

func (cp *controlPlane) pid() int { return cp.cmd.Process.Pid }

// The metrics a sample reads, as exposed (name and labels).
const (
	mVersions   = "meshdns_controlplane_versions_total"
	mDeltas     = `meshdns_controlplane_pushes_total{kind="delta"}`
	mFulls      = `meshdns_controlplane_pushes_total{kind="full"}`
	mHolds      = "meshdns_controlplane_push_holds_total"
	mConnected  = "meshdns_controlplane_agents_connected"
	mReloads    = "meshdns_controlplane_file_reloads_total"
	mMarshals   = `meshdns_controlplane_marshals_total{kind="delta"}`
	mHeap       = "go_memstats_heap_inuse_bytes"
	mGoroutines = "go_goroutines"
	mStreamsOK  = `meshdns_controlplane_streams_total{result="ok"}`
	mStreamsErr = `meshdns_controlplane_streams_total{result="error"}`
	mWaiting    = "meshdns_controlplane_admission_waiting"
)

var sampled = []string{mVersions, mDeltas, mFulls, mHolds, mConnected, mReloads, mMarshals, mHeap, mGoroutines,
	mStreamsOK, mStreamsErr, mWaiting}

// metrics reads the sampled metrics; one absent is reported as -1 (a
// build that renamed it), not as an error.
func (cp *controlPlane) metrics() (map[string]float64, error) {
	resp, err := cp.http.Get("http://" + cp.admin + "/metrics")
	if err != nil {
		return nil, fmt.Errorf("scrape metrics: %w", err)
	}
	defer resp.Body.Close()
	m := make(map[string]float64, len(sampled))
	for _, n := range sampled {
		m[n] = -1
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if _, want := m[name]; !ok || !want {
			continue
		}
		if v, err := strconv.ParseFloat(val, 64); err == nil {
			m[name] = v
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("scrape metrics: %w", err)
	}
	return m, nil
}

// agentInfo is what the tool reads of /debug/agents.
type agentInfo struct {
	Pod       string    `json:"pod"`
	Claimed   string    `json:"claimedPod"`
	Namespace string    `json:"namespace"`
	Acked     string    `json:"acked"`
	View      string    `json:"view"`
	Sent      string    `json:"sent"`
	Peer      string    `json:"peer"`
	Connected time.Time `json:"connected"`
	Holds     int       `json:"holds"`
}

// String names the agent and its state, for a report.
func (a agentInfo) String() string {
	return fmt.Sprintf("%s/%s from %s connected %s: sent %.8s acked %.8s view %.8s holds %d", a.Namespace, a.Pod, a.Peer,
		a.Connected.Format("15:04:05.000"), a.Sent, a.Acked, a.View, a.Holds)
}

func (cp *controlPlane) agents() ([]agentInfo, error) {
	resp, err := cp.http.Get("http://" + cp.admin + "/debug/agents")
	if err != nil {
		return nil, fmt.Errorf("get /debug/agents: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("get /debug/agents: %s", resp.Status)
	}
	var out []agentInfo
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, fmt.Errorf("decode /debug/agents: %w", err)
	}
	return out, nil
}

// current is the version an agent's view holds now and the change its
// marker names, from /debug/nametable: agents that got the version in a
// full table cannot say (the load agents skip full tables unread).
func (cp *controlPlane) current(namespace, pod string) (version string, seq int, err error) {
	q := url.Values{"agent": {namespace + "/" + pod}}
	resp, err := cp.http.Get("http://" + cp.admin + "/debug/nametable?" + q.Encode())
	if err != nil {
		return "", -1, fmt.Errorf("get /debug/nametable: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", -1, fmt.Errorf("get /debug/nametable: %s", resp.Status)
	}
	var v struct {
		Version string `json:"version"`
		Table   struct {
			Table map[string]struct {
				IPs []string `json:"ips"`
			} `json:"table"`
		} `json:"table"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return "", -1, fmt.Errorf("decode /debug/nametable: %w", err)
	}
	m := v.Table.Table[markerName]
	if len(m.IPs) == 0 {
		return "", -1, fmt.Errorf("/debug/nametable: version %s has no %s", v.Version, markerName)
	}
	return v.Version, addrSeq(m.IPs[0]), nil
}

// procSample is a process's CPU time and resident memory.
type procSample struct {
	cpu time.Duration // utime+stime
	rss int64         // bytes
}

// readProc reads /proc/<pid>/stat (utime, stime in clock ticks of
// USER_HZ, 100 on Linux) and /proc/<pid>/status (VmRSS).
func readProc(pid int) (procSample, error) {
	var s procSample
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return s, fmt.Errorf("read stat: %w", err)
	}
	// The command name may hold spaces: the fields start after its ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 || i+2 > len(b) {
		return s, errors.New("read stat: no command name")
	}
	f := strings.Fields(string(b[i+2:]))
	if len(f) < 13 {
		return s, errors.New("read stat: short")
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	s.cpu = time.Duration(ut+st) * 10 * time.Millisecond
	b, err = os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, fmt.Errorf("read status: %w", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			s.rss = kb << 10
		}
	}
	return s, nil
}

// waitCtx sleeps d or until ctx ends.
func waitCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
