// Package cptest holds a thin NameTable agent for the control plane's
// tests: it keeps the table the responses describe, as the real agent
// must, and lets a test ACK, NACK or stall.
package cptest

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// Agent is one test agent stream.
type Agent struct {
	t      testing.TB
	conn   *grpc.ClientConn
	stream grpc.BidiStreamingClient[meshdnsv1.StreamNameTableRequest, meshdnsv1.StreamNameTableResponse]
	cancel context.CancelFunc
	// Resps delivers responses; closed when the stream ends, after the
	// error is put in Errs.
	Resps chan *meshdnsv1.StreamNameTableResponse
	Errs  chan error

	// Version, Table and Zones are the agent's current table, Settings
	// its settings (nil for none).
	Version  string
	Table    map[string]*meshdnsv1.NameInfo
	Zones    []string
	Settings *meshdnsv1.AgentSettings
}

// DialOpts says who the agent is.
type DialOpts struct {
	Namespace, Pod, ClusterDomain string
	// Resume is the version the agent reports it holds.
	Resume string
	// Rejected, when set, is the version the agent reports it crashed
	// running (rejected_version, with error_detail code ABORTED).
	Rejected string
	// TLS, when set, dials with TLS.
	TLS *tls.Config
	// Token, when set, is sent as "authorization: Bearer <token>".
	Token string
	// NoRead leaves responses unread until Read is called (a slow agent).
	NoRead bool
	// Window, when set, fixes the HTTP/2 stream and connection windows
	// (and so turns off gRPC's growing them), so an agent that does not
	// read blocks the server after that many bytes.
	Window int32
	// Features are the agent's AgentIdentity.features.
	Features []string
	// Source, when set, is the local IP address to dial from (any of
	// 127.0.0.0/8 on loopback), so tests can be several peers.
	Source string
}

// NoPod as DialOpts.Pod sends an empty pod name.
const NoPod = "-"

// Dial opens a stream and sends the identity. A refused connection is
// reported through Errs, not as a test failure.
func Dial(t testing.TB, addr string, o DialOpts) *Agent {
	t.Helper()
	creds := insecure.NewCredentials()
	if o.TLS != nil {
		creds = credentials.NewTLS(o.TLS)
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(creds)}
	if o.Source != "" {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(o.Source)}}
		opts = append(opts, grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return d.DialContext(ctx, "tcp", addr)
		}))
	}
	if o.Window > 0 {
		opts = append(opts, grpc.WithInitialWindowSize(o.Window), grpc.WithInitialConnWindowSize(o.Window))
	}
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if o.Token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+o.Token)
	}
	st, err := meshdnsv1.NewNameDiscoveryServiceClient(conn).StreamNameTable(ctx)
	a := &Agent{t: t, conn: conn, stream: st, cancel: cancel,
		Resps: make(chan *meshdnsv1.StreamNameTableResponse, 64), Errs: make(chan error, 1),
		Version: o.Resume, Table: map[string]*meshdnsv1.NameInfo{}}
	t.Cleanup(a.Close)
	switch o.Pod {
	case "":
		o.Pod = "pod"
	case NoPod:
		o.Pod = ""
	}
	if err == nil {
		err = st.Send(&meshdnsv1.StreamNameTableRequest{
			Identity: &meshdnsv1.AgentIdentity{PodName: o.Pod, Namespace: o.Namespace, ClusterDomain: o.ClusterDomain,
				InstanceId: "test-" + o.Pod, Features: o.Features},
			VersionInfo: o.Resume, RejectedVersion: o.Rejected, ErrorDetail: crashDetail(o.Rejected),
		})
	}
	if errors.Is(err, io.EOF) {
		// The server ended the stream before reading the identity (a
		// refusal before any handler runs): its status is what Recv
		// returns, not Send's io.EOF.
		var r *meshdnsv1.StreamNameTableResponse
		if r, err = st.Recv(); err == nil {
			a.Resps <- r
		}
	}
	if err != nil {
		a.Errs <- err
		close(a.Resps)
		return a
	}
	if !o.NoRead {
		go a.Read()
	}
	return a
}

// Read receives responses into Resps until the stream ends. Dial starts
// it unless NoRead is set.
func (a *Agent) Read() {
	for {
		r, err := a.stream.Recv()
		if err != nil {
			a.Errs <- err
			close(a.Resps)
			return
		}
		a.Resps <- r
	}
}

// Close ends the stream; idempotent.
func (a *Agent) Close() {
	a.cancel()
	a.conn.Close()
}

// Recv waits up to 5s for the next response.
func (a *Agent) Recv() *meshdnsv1.StreamNameTableResponse {
	a.t.Helper()
	select {
	case r, ok := <-a.Resps:
		if !ok {
			a.t.Fatalf("stream ended: %v", <-a.Errs)
		}
		return r
	case <-time.After(5 * time.Second):
		a.t.Fatal("no response within 5s")
	}
	return nil
}

// None asserts that nothing arrives for d.
func (a *Agent) None(d time.Duration) {
	a.t.Helper()
	select {
	case r := <-a.Resps:
		a.t.Fatalf("unexpected response %v", r)
	case <-time.After(d):
	}
}

// Apply changes the table as r says, or returns why the agent would NACK.
func (a *Agent) Apply(r *meshdnsv1.StreamNameTableResponse) error {
	switch u := r.GetUpdate().(type) {
	case *meshdnsv1.StreamNameTableResponse_Full:
		a.Table = map[string]*meshdnsv1.NameInfo{}
		for k, v := range u.Full.GetTable() {
			a.Table[k] = v
		}
		a.Zones = u.Full.GetAuthoritativeZones()
		a.Settings = u.Full.GetSettings()
	case *meshdnsv1.StreamNameTableResponse_Delta:
		if u.Delta.GetBaseVersion() != a.Version {
			return fmt.Errorf("delta base %q, have %q", u.Delta.GetBaseVersion(), a.Version)
		}
		for k, v := range u.Delta.GetUpserted() {
			a.Table[k] = v
		}
		for _, k := range u.Delta.GetRemoved() {
			delete(a.Table, k)
		}
		if zs := u.Delta.GetAuthoritativeZones(); zs != nil {
			a.Zones = zs.GetZones()
		}
		if st := u.Delta.GetSettings(); st != nil {
			a.Settings = st // present: replaces them whole
		}
	default:
		return fmt.Errorf("response without update")
	}
	a.Version = r.GetVersionInfo()
	return nil
}

// Ack acknowledges r (the agent now holds a.Version).
func (a *Agent) Ack(r *meshdnsv1.StreamNameTableResponse) {
	a.t.Helper()
	if err := a.stream.Send(&meshdnsv1.StreamNameTableRequest{VersionInfo: a.Version, ResponseNonce: r.GetNonce()}); err != nil {
		a.t.Fatal(err)
	}
}

// Nack rejects r with msg; the agent keeps a.Version.
func (a *Agent) Nack(r *meshdnsv1.StreamNameTableResponse, msg string) {
	a.t.Helper()
	if err := a.stream.Send(&meshdnsv1.StreamNameTableRequest{VersionInfo: a.Version, ResponseNonce: r.GetNonce(),
		ErrorDetail: &meshdnsv1.ErrorDetail{Code: 3, Message: msg}}); err != nil {
		a.t.Fatal(err)
	}
}

// Next receives, applies and ACKs one response, failing on a bad one.
func (a *Agent) Next() *meshdnsv1.StreamNameTableResponse {
	a.t.Helper()
	r := a.Recv()
	if err := a.Apply(r); err != nil {
		a.t.Fatal(err)
	}
	a.Ack(r)
	return r
}

// IPs returns hostname -> first IP ("" for none) of the agent's table.
func (a *Agent) IPs() map[string]string {
	out := map[string]string{}
	for k, v := range a.Table {
		if len(v.GetIps()) > 0 {
			out[k] = v.GetIps()[0]
		} else {
			out[k] = ""
		}
	}
	return out
}

// Kind is "full", "delta" or "none".
func Kind(r *meshdnsv1.StreamNameTableResponse) string {
	switch r.GetUpdate().(type) {
	case *meshdnsv1.StreamNameTableResponse_Full:
		return "full"
	case *meshdnsv1.StreamNameTableResponse_Delta:
		return "delta"
	}
	return "none"
}

// crashDetail is the error detail of a first request reporting a crash on
// rejected, or nil when it reports none.
func crashDetail(rejected string) *meshdnsv1.ErrorDetail {
	if rejected == "" {
		return nil
	}
	return &meshdnsv1.ErrorDetail{Code: 10, Message: "agent died running " + rejected}
}
