package agent

import (
	"bufio"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/internal/testkit/testenv"
	"github.com/meshdns/meshdns/pkg/proxy"
)

// dnstapCLI returns the dnstap command of golang-dnstap, from
// $DNSTAP_DIR (default ~/.cache/meshdns/dnstap, filled by make deps).
func dnstapCLI(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("DNSTAP_DIR")
	if dir == "" {
		home, _ := os.UserHomeDir()
		dir = filepath.Join(home, ".cache", "meshdns", "dnstap")
	}
	p := filepath.Join(dir, "dnstap")
	if _, err := os.Stat(p); err != nil {
		testenv.Unavailable(t, "needs the dnstap command in %s (make deps builds it)", dir)
	}
	return p
}

// dnstapFrame is the part of the dnstap command's JSON output (-j) the
// tests read.
type dnstapFrame struct {
	Identity string `json:"identity"`
	Message  struct {
		Type            string `json:"type"`
		SocketProtocol  string `json:"socket_protocol"`
		QueryAddress    string `json:"query_address"`
		QueryPort       int    `json:"query_port"`
		ResponseAddress string `json:"response_address"`
		ResponsePort    int    `json:"response_port"`
		QueryTime       string `json:"query_time"`
		ResponseTime    string `json:"response_time"`
		QueryMessage    string `json:"query_message"`
		ResponseMessage string `json:"response_message"`
	} `json:"message"`
}

// startDnstapReader runs the dnstap command reading from a unix socket
// ("unix") or a TCP port ("tcp") and returns the --dnstap address for it
// and the frames it prints.
func startDnstapReader(t *testing.T, network string) (string, <-chan dnstapFrame) {
	t.Helper()
	cli := dnstapCLI(t)
	var addr string
	var args []string
	if network == "unix" {
		path := filepath.Join(t.TempDir(), "dnstap.sock")
		addr, args = "unix://"+path, []string{"-u", path, "-j"}
	} else {
		// A port that was free a moment ago: the agent dials until the
		// command listens, so a race here costs a retry at most.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		hp := ln.Addr().String()
		ln.Close()
		addr, args = "tcp://"+hp, []string{"-l", hp, "-j"}
	}
	cmd := exec.Command(cli, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	frames := make(chan dnstapFrame, 64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var f dnstapFrame
			if err := json.Unmarshal(sc.Bytes(), &f); err != nil {
				t.Errorf("dnstap printed %q: %v", sc.Text(), err)
				continue
			}
			frames <- f
		}
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
		cmd.Wait()
	})
	return addr, frames
}

// The agent's dnstap stream, read by the dnstap command of golang-dnstap
// over a unix socket and over TCP: a CLIENT_QUERY and a CLIENT_RESPONSE
// per answer the query log selects, naming the pod, with the question and
// the rcode the client got; between them, for an answer fetched upstream
// (not for a table answer), the FORWARDER_QUERY and FORWARDER_RESPONSE
// from the agent's socket to the upstream, with the message it sent and
// the one it got back.
func TestDnstapReadByDnstapCommand(t *testing.T) {
	for _, network := range []string{"unix", "tcp"} {
		t.Run(network, func(t *testing.T) {
			addr, frames := startDnstapReader(t, network)
			up := startUpstream(t)
			path := writeFile(t, t.TempDir(), "nametable.json", readExample(t))
			lines := &testenv.Buffer{}
			a := startAgent(t, Config{NameTableFile: path, Upstreams: []string{up.addr}, PodName: "web-0",
				QueryLog: proxy.QueryLogConfig{Classes: proxy.LogNXDomain | proxy.LogServFail}, QueryLogOutput: lines,
				QueryLogNoLines: true, Dnstap: addr})
			eventually(t, "ready", a.Ready)
			_, port, _ := net.SplitHostPort(a.dns)
			_, upPort, _ := net.SplitHostPort(up.addr)

			exchange(t, "udp", a.dns, "web.demo.svc.cluster.local", dns.TypeA) // NOERROR: not selected
			exchange(t, "udp", a.dns, "nope.demo.svc.cluster.local", dns.TypeA)
			exchange(t, "tcp", a.dns, "missing.example.com", dns.TypeAAAA) // NXDOMAIN from upstream

			type seen struct{ typ, proto, question, status string }
			var got []seen
			var fwd []dnstapFrame
			for range 6 {
				var f dnstapFrame
				select {
				case f = <-frames:
				case <-time.After(patience(t)):
					t.Fatalf("dnstap printed %d frames, want 6: %+v", len(got), got)
				}
				m := f.Message
				if f.Identity != "demo/web-0" || m.QueryAddress != "127.0.0.1" || m.QueryTime == "" {
					t.Errorf("frame %+v: want identity demo/web-0, query from 127.0.0.1, a query time", f)
				}
				msg := m.QueryMessage
				switch m.Type {
				case "CLIENT_QUERY", "CLIENT_RESPONSE":
					if port != itoa(m.ResponsePort) {
						t.Errorf("frame %+v: want response port %s (the agent's)", f, port)
					}
				case "FORWARDER_QUERY", "FORWARDER_RESPONSE":
					fwd = append(fwd, f)
					if m.ResponseAddress != "127.0.0.1" || upPort != itoa(m.ResponsePort) || m.QueryPort == 0 {
						t.Errorf("frame %+v: want response address 127.0.0.1 port %s (the upstream's), a query port", f, upPort)
					}
				}
				if strings.HasSuffix(m.Type, "_RESPONSE") {
					msg = m.ResponseMessage
					if m.ResponseTime == "" || m.QueryMessage != "" {
						t.Errorf("response without a time, or with the query: %+v", f)
					}
				}
				got = append(got, seen{m.Type, m.SocketProtocol, question(msg), status(msg)})
			}
			want := []seen{
				{"CLIENT_QUERY", "UDP", "nope.demo.svc.cluster.local. A", "NOERROR"},
				{"CLIENT_RESPONSE", "UDP", "nope.demo.svc.cluster.local. A", "NXDOMAIN"},
				{"CLIENT_QUERY", "TCP", "missing.example.com. AAAA", "NOERROR"},
				{"FORWARDER_QUERY", "UDP", "missing.example.com. AAAA", "NOERROR"},
				{"FORWARDER_RESPONSE", "UDP", "missing.example.com. AAAA", "NXDOMAIN"},
				{"CLIENT_RESPONSE", "TCP", "missing.example.com. AAAA", "NXDOMAIN"},
			}
			for i := range want {
				if got[i] != want[i] {
					t.Errorf("frame %d: %+v, want %+v", i, got[i], want[i])
				}
			}
			if len(fwd) == 2 {
				q, r := fwd[0].Message, fwd[1].Message
				if q.QueryPort != r.QueryPort || q.QueryTime != r.QueryTime || msgID(q.QueryMessage) != msgID(r.ResponseMessage) || msgID(q.QueryMessage) == "" {
					t.Errorf("forwarder frames do not match: query port %d/%d, time %s/%s, id %q/%q", q.QueryPort, r.QueryPort,
						q.QueryTime, r.QueryTime, msgID(q.QueryMessage), msgID(r.ResponseMessage))
				}
			}
			eventually(t, "6 frames counted sent", func() bool {
				return counter(t, a.reg, "meshdns_agent_dnstap_connects_total", "result", "ok") >= 1 && sentFrames(t, a) == 6
			})
			if s := lines.String(); s != "" {
				t.Errorf("JSON lines written with --query-log-stderr=false: %q", s)
			}
		})
	}
}

// sentFrames reads meshdns_agent_dnstap_frames_sent_total.
func sentFrames(t testing.TB, a *testAgent) uint64 {
	t.Helper()
	return a.Agent.aux.tap.w.Stats().Sent
}

func itoa(n int) string { return strconv.Itoa(n) }

// question returns "name TYPE" of the question section of miekg's text
// form of a message, status the rcode of its header line.
func question(msg string) string {
	_, after, ok := strings.Cut(msg, ";; QUESTION SECTION:\n;")
	if !ok {
		return ""
	}
	f := strings.Fields(strings.SplitN(after, "\n", 2)[0])
	if len(f) < 3 {
		return ""
	}
	return f[0] + " " + f[2]
}

// msgID returns the ID of the header line of miekg's text form.
func msgID(msg string) string {
	_, after, ok := strings.Cut(msg, ", id: ")
	if !ok {
		return ""
	}
	id, _, _ := strings.Cut(after, "\n")
	return id
}

func status(msg string) string {
	_, after, ok := strings.Cut(msg, "status: ")
	if !ok {
		return ""
	}
	s, _, _ := strings.Cut(after, ",")
	return s
}
