package server_test

import (
	"bytes"
	"crypto/tls"
	"io"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/meshdns/meshdns/controlplane/server"
	"github.com/meshdns/meshdns/internal/grpcstream"
	"github.com/meshdns/meshdns/internal/testkit/certtest"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// streamAgent is an agent's stream on the agent's own client
// (internal/grpcstream, net/http's HTTP/2).
type streamAgent struct {
	t  testing.TB
	st *grpcstream.Stream
}

func dialStream(t testing.TB, addr string, c *tls.Config, pod string) *streamAgent {
	t.Helper()
	cl, err := grpcstream.New(grpcstream.Config{Addr: addr, TLS: c})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	st, err := cl.Open(t.Context(), meshdnsv1.NameDiscoveryService_StreamNameTable_FullMethodName, nil)
	if err != nil {
		t.Fatal(err)
	}
	a := &streamAgent{t: t, st: st}
	a.send(&meshdnsv1.StreamNameTableRequest{Identity: &meshdnsv1.AgentIdentity{Namespace: "ns", PodName: pod}})
	return a
}

func (a *streamAgent) send(req *meshdnsv1.StreamNameTableRequest) {
	a.t.Helper()
	b, err := proto.Marshal(req)
	if err != nil {
		a.t.Fatal(err)
	}
	if err := a.st.Send(b); err != nil {
		a.t.Fatal(err)
	}
}

// recvAndAck reads the next response and ACKs it.
func (a *streamAgent) recvAndAck() *meshdnsv1.StreamNameTableResponse {
	a.t.Helper()
	resp, err := a.tryRecvAndAck()
	if err != nil {
		a.t.Fatal(err)
	}
	return resp
}

// tryRecvAndAck is recvAndAck for a goroutine other than the test's.
func (a *streamAgent) tryRecvAndAck() (*meshdnsv1.StreamNameTableResponse, error) {
	r, _, err := a.st.Recv()
	if err != nil {
		return nil, err
	}
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	resp := new(meshdnsv1.StreamNameTableResponse)
	if err := proto.Unmarshal(b, resp); err != nil {
		return nil, err
	}
	b, err = proto.Marshal(&meshdnsv1.StreamNameTableRequest{VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()})
	if err != nil {
		return nil, err
	}
	return resp, a.st.Send(b)
}

// goroutinesWith counts the goroutines whose stack has fn.
func goroutinesWith(t testing.TB, fn string) int {
	t.Helper()
	var b bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&b, 2); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, g := range strings.Split(b.String(), "\n\n") {
		if strings.Contains(g, fn) {
			n++
		}
	}
	return n
}

// The agent's own client gets tables and deltas, with and without TLS,
// and the server keeps no goroutine for an idle agent connection: its
// reader runs only while the socket has bytes (grpc-go kept four).
func TestAgentClientNoGoroutinePerIdleConnection(t *testing.T) {
	tests := transports(t)
	const agents = 5
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, harnessOpts{tls: tc.server})
			tableThenDelta(t, h, tc.client, agents)
			// The readers return once the ACKs are read; 10s bounds one
			// that never does.
			for deadline := time.Now().Add(10 * time.Second); goroutinesWith(t, "agentstream.(*conn).read") > 0; time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("%d agentstream readers on idle connections, want none", goroutinesWith(t, "agentstream.(*conn).read"))
				}
			}
			if got := goroutinesWith(t, "google.golang.org/grpc/internal/transport"); got != 0 {
				t.Errorf("%d grpc-go transport goroutines, want none", got)
			}
			if got := goroutinesWith(t, "server.(*Server).StreamNameTable"); got != 0 {
				t.Errorf("%d grpc-go handlers, want none", got)
			}
		})
	}
}

// GRPCAgentStream serves the agents' stream on grpc-go, as before
// agentstream: the agent's client gets tables and deltas, with and
// without TLS, from grpc-go's handler, and agentstream serves nothing.
func TestGRPCAgentStream(t *testing.T) {
	tests := transports(t)
	const agents = 3
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, harnessOpts{tls: tc.server, server: func(c *server.Config) { c.GRPCAgentStream = true }})
			tableThenDelta(t, h, tc.client, agents)
			if got := goroutinesWith(t, "server.(*Server).StreamNameTable"); got != agents {
				t.Errorf("%d grpc-go handlers, want %d", got, agents)
			}
			if got := goroutinesWith(t, "agentstream."); got != 0 {
				t.Errorf("%d agentstream goroutines, want none", got)
			}
		})
	}
}

// tableThenDelta connects n agents with the agent's own client, each
// gets a full table, then a change as a delta, and ACKs it.
// transport is a way the agents reach the server: plaintext, or mTLS with
// the two ends' configurations.
type transport struct {
	name           string
	server, client *tls.Config
}

func transports(t *testing.T) []transport {
	t.Helper()
	ca := certtest.NewCA(t, "test ca")
	srvCert, srvKey := ca.Issue(t, "controlplane", true)
	cliCert, cliKey := ca.Issue(t, "agent", false)
	return []transport{
		{name: "plaintext"},
		{name: "mTLS", server: certtest.ServerTLS(t, srvCert, srvKey, ca), client: certtest.ClientTLS(t, ca, cliCert, cliKey)},
	}
}

func tableThenDelta(t *testing.T, h *harness, client *tls.Config, n int) {
	t.Helper()
	h.publish(t, entry("a.corp.example", "10.0.0.1"))
	var as []*streamAgent
	for i := range n {
		a := dialStream(t, h.addr, client, "pod-"+string(rune('a'+i)))
		if r := a.recvAndAck(); r.GetFull() == nil {
			t.Fatalf("agent %d: first response is not a full table", i)
		}
		as = append(as, a)
	}
	h.publish(t, entry("a.corp.example", "10.0.0.1"), entry("b.corp.example", "10.0.0.2"))
	// Every agent reads at once: the staged rollout sends the change to
	// the canaries first, and to the others once the canaries ACKed it.
	type got struct {
		r   *meshdnsv1.StreamNameTableResponse
		err error
	}
	deltas := make([]chan got, len(as))
	for i, a := range as {
		deltas[i] = make(chan got, 1)
		go func() { r, err := a.tryRecvAndAck(); deltas[i] <- got{r, err} }()
	}
	v := ""
	for i, ch := range deltas {
		g := <-ch
		if g.err != nil {
			t.Fatalf("agent %d: %v", i, g.err)
		}
		if g.r.GetDelta() == nil {
			t.Fatalf("agent %d: the change is not a delta", i)
		}
		v = g.r.GetVersionInfo()
	}
	waitFor(t, "every agent's ACK of the delta", func() bool {
		acked := 0
		for _, ai := range h.srv.Agents() {
			if ai.Acked == v {
				acked++
			}
		}
		return acked == n
	})
}
