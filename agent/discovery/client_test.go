package discovery

import (
	"context"
	"errors"
	"fmt"
	"google.golang.org/protobuf/proto"
	"io"
	"log/slog"
	"net"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/meshdns/meshdns/agent/discovery/discoverytest"
	meshmetrics "github.com/meshdns/meshdns/internal/metrics"
	"github.com/meshdns/meshdns/internal/namewire"
	"github.com/meshdns/meshdns/internal/testkit/certtest"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// recorder is an Apply that keeps what it applied and rejects any table
// holding the name "bad.example", like the agent's validation would.
type recorder struct {
	mu       sync.Mutex
	versions []string
	last     *meshdnsv1.NameTable
	lastV    *Version
}

func (r *recorder) apply(v *Version) error {
	nt, err := namewire.Collect(v.Walk)
	if err != nil {
		return err
	}
	t := toProto(nt)
	if _, bad := t.GetTable()["bad.example"]; bad {
		return errors.New(`name "bad.example": bad address`)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.versions = append(r.versions, v.ID())
	r.last = t
	r.lastV = v
	return nil
}

// current walks the version last applied again, as the agent does for
// its next comparison and /debug/nametable: a version stays walkable
// while it is the one applied (from memory, or the state file it was
// committed to).
func (r *recorder) current(t testing.TB) (string, *meshdnsv1.NameTable) {
	t.Helper()
	r.mu.Lock()
	v := r.lastV
	r.mu.Unlock()
	nt, err := namewire.Collect(v.Walk)
	if err != nil {
		t.Fatalf("walk the version applied again: %v", err)
	}
	return v.ID(), toProto(nt)
}

func (r *recorder) names() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for k := range r.last.GetTable() {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func table(names ...string) *meshdnsv1.NameTable {
	t := &meshdnsv1.NameTable{Table: map[string]*meshdnsv1.NameInfo{}, AuthoritativeZones: []string{"cluster.local"}}
	for _, n := range names {
		t.Table[n] = &meshdnsv1.NameInfo{Ips: []string{"10.0.0.1"}}
	}
	return t
}

func full(version, nonce string, t *meshdnsv1.NameTable) *meshdnsv1.StreamNameTableResponse {
	return &meshdnsv1.StreamNameTableResponse{VersionInfo: version, Nonce: nonce, Update: &meshdnsv1.StreamNameTableResponse_Full{Full: t}}
}

func delta(version, nonce, base string, upsert []string, remove []string) *meshdnsv1.StreamNameTableResponse {
	d := &meshdnsv1.NameTableDelta{BaseVersion: base, Upserted: map[string]*meshdnsv1.NameInfo{}, Removed: remove}
	for _, n := range upsert {
		d.Upserted[n] = &meshdnsv1.NameInfo{Ips: []string{"10.0.0.2"}}
	}
	return &meshdnsv1.StreamNameTableResponse{VersionInfo: version, Nonce: nonce, Update: &meshdnsv1.StreamNameTableResponse_Delta{Delta: d}}
}

// startClient runs a client until the test ends.
func startClient(t testing.TB, cfg Config) *Client {
	t.Helper()
	c := newClient(t, cfg)
	runClient(t, c)
	return c
}

// newClient returns a client with test timings and a quiet logger.
func newClient(t testing.TB, cfg Config) *Client {
	t.Helper()
	cfg.MinBackoff = 10 * time.Millisecond
	cfg.MaxBackoff = 100 * time.Millisecond
	cfg.ConnectTimeout = 2 * time.Second
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// runClient runs c until the test ends.
func runClient(t testing.TB, c *Client) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

// deadAddr is a loopback address nothing listens on.
func deadAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := l.Addr().String()
	l.Close()
	return a
}

var reqCmp = protocmp.Transform()

// The stream's responses are applied, ACKed and NACKed alike whether the
// applied table is kept in memory or, with a state dir, only in the state
// file; the one difference: in memory the base of deltas is dropped before
// a build (never two wire forms held at once), so after a rejected full
// table the next delta is NACKed as on an unknown base (the server then
// sends a full table), while the state file keeps it.
func TestStreamFullDeltaAckNack(t *testing.T) {
	for _, stateDir := range []bool{false, true} {
		name := "memory"
		if stateDir {
			name = "state dir"
		}
		t.Run(name, func(t *testing.T) { testStreamFullDeltaAckNack(t, stateDir) })
	}
}

func testStreamFullDeltaAckNack(t *testing.T, stateDir bool) {
	srv := discoverytest.Start(t, "127.0.0.1:0", nil)
	rec := &recorder{}
	reg := meshmetrics.NewRegistry()
	cfg := Config{
		Addrs: []string{srv.Addr}, PodName: "web-0", Namespace: "demo", ClusterDomain: "cluster.local",
		AgentVersion: "test", Apply: rec.apply, Registry: reg,
	}
	if stateDir {
		cfg.StateDir = t.TempDir()
	}
	c := startClient(t, cfg)
	invalidDelta := &meshdnsv1.ErrorDetail{Code: int32(codes.InvalidArgument), Message: `name "bad.example": bad address`}
	if !stateDir {
		invalidDelta = &meshdnsv1.ErrorDetail{Code: int32(codes.FailedPrecondition), Message: `delta for base version "v2", agent holds no base table`}
	}

	first := srv.Recv(t)
	if _, err := uuid.Parse(first.GetIdentity().GetInstanceId()); err != nil {
		t.Errorf("instance id %q is not a UUID: %v", first.GetIdentity().GetInstanceId(), err)
	}
	wantFirst := &meshdnsv1.StreamNameTableRequest{Identity: &meshdnsv1.AgentIdentity{
		PodName: "web-0", Namespace: "demo", ClusterDomain: "cluster.local",
		InstanceId: first.GetIdentity().GetInstanceId(), AgentVersion: "test",
	}}
	if diff := cmp.Diff(wantFirst, first, reqCmp); diff != "" {
		t.Errorf("first request (-want +got)\n%s", diff)
	}

	steps := []struct {
		name      string
		resp      *meshdnsv1.StreamNameTableResponse
		want      *meshdnsv1.StreamNameTableRequest
		wantNames []string
	}{
		{
			name:      "full table is applied and acked",
			resp:      full("v1", "n1", table("a.example", "b.example")),
			want:      &meshdnsv1.StreamNameTableRequest{VersionInfo: "v1", ResponseNonce: "n1"},
			wantNames: []string{"a.example", "b.example"},
		},
		{
			name:      "delta on the current version is applied",
			resp:      delta("v2", "n2", "v1", []string{"c.example"}, []string{"a.example"}),
			want:      &meshdnsv1.StreamNameTableRequest{VersionInfo: "v2", ResponseNonce: "n2"},
			wantNames: []string{"b.example", "c.example"},
		},
		{
			name: "delta on another version is nacked",
			resp: delta("v4", "n3", "v3", []string{"d.example"}, nil),
			want: &meshdnsv1.StreamNameTableRequest{VersionInfo: "v2", ResponseNonce: "n3", ErrorDetail: &meshdnsv1.ErrorDetail{
				Code: int32(codes.FailedPrecondition), Message: `delta for base version "v3", agent has "v2"`,
			}},
			wantNames: []string{"b.example", "c.example"},
		},
		{
			name: "invalid full table is nacked and the last good kept",
			resp: full("v5", "n4", table("bad.example")),
			want: &meshdnsv1.StreamNameTableRequest{VersionInfo: "v2", ResponseNonce: "n4", ErrorDetail: &meshdnsv1.ErrorDetail{
				Code: int32(codes.InvalidArgument), Message: `name "bad.example": bad address`,
			}},
			wantNames: []string{"b.example", "c.example"},
		},
		{
			name:      "invalid delta is nacked",
			resp:      delta("v6", "n5", "v2", []string{"bad.example"}, nil),
			want:      &meshdnsv1.StreamNameTableRequest{VersionInfo: "v2", ResponseNonce: "n5", ErrorDetail: invalidDelta},
			wantNames: []string{"b.example", "c.example"},
		},
		{
			name:      "full table after a nack",
			resp:      full("v7", "n6", table("e.example")),
			want:      &meshdnsv1.StreamNameTableRequest{VersionInfo: "v7", ResponseNonce: "n6"},
			wantNames: []string{"e.example"},
		},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			srv.Send(st.resp)
			got := srv.Recv(t)
			if diff := cmp.Diff(st.want, got, reqCmp); diff != "" {
				t.Errorf("reply (-want +got)\n%s", diff)
			}
			if diff := cmp.Diff(st.wantNames, rec.names()); diff != "" {
				t.Errorf("applied names (-want +got)\n%s", diff)
			}
		})
	}
	select {
	case <-c.Synced():
	default:
		t.Error("not synced after applied tables")
	}
	if got := c.metrics.responses.WithLabelValues("delta", "nack").Value(); got != 2 {
		t.Errorf("delta nacks = %v, want 2", got)
	}
	if got := c.metrics.connected.Value(); got != 1 {
		t.Errorf("connected = %v, want 1", got)
	}
}

func TestFailoverAndResume(t *testing.T) {
	a := discoverytest.Start(t, "127.0.0.1:0", nil)
	b := discoverytest.Start(t, "127.0.0.1:0", nil)
	rec := &recorder{}
	dead := deadAddr(t)
	c := startClient(t, Config{Addrs: []string{dead, a.Addr, b.Addr}, Namespace: "demo", Apply: rec.apply})

	// The dead first address is skipped; a is the first reachable one.
	if v := a.Recv(t).GetVersionInfo(); v != "" {
		t.Fatalf("first version_info = %q, want empty", v)
	}
	a.Send(full("v1", "n1", table("a.example")))
	if got := a.Recv(t); got.GetVersionInfo() != "v1" {
		t.Fatalf("ack = %v", got)
	}
	if got := c.Addr(); got != a.Addr {
		t.Errorf("connected to %q, want %q", got, a.Addr)
	}

	// a drops the stream (restart): the client comes back to a, the first
	// reachable address, and resumes from v1.
	a.DropStream()
	re := a.Recv(t)
	if re.GetVersionInfo() != "v1" || re.GetIdentity() == nil {
		t.Fatalf("reconnect request = %v, want identity and version_info v1", re)
	}
	a.Send(delta("v2", "n2", "v1", []string{"b.example"}, nil))
	if got := a.Recv(t); got.GetVersionInfo() != "v2" || got.GetErrorDetail() != nil {
		t.Fatalf("ack after resume = %v", got)
	}

	// a goes away for good: the client fails over to b with v2.
	a.Stop()
	first := b.Recv(t)
	if first.GetVersionInfo() != "v2" {
		t.Fatalf("failover request version_info = %q, want v2", first.GetVersionInfo())
	}
	b.Send(delta("v3", "n3", "v2", []string{"c.example"}, nil))
	if got := b.Recv(t); got.GetVersionInfo() != "v3" {
		t.Fatalf("ack from b = %v", got)
	}
	if diff := cmp.Diff([]string{"a.example", "b.example", "c.example"}, rec.names()); diff != "" {
		t.Errorf("names (-want +got)\n%s", diff)
	}
	if got := c.Addr(); got != b.Addr {
		t.Errorf("connected to %q, want %q", got, b.Addr)
	}
}

func TestReconnectAfterOutage(t *testing.T) {
	// Every address is down at first: the client backs off and keeps
	// trying, then connects as soon as a server listens there.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	rec := &recorder{}
	c := startClient(t, Config{Addrs: []string{addr}, Apply: rec.apply})
	// Two failed attempts: the client has backed off at least once.
	testenv.Eventually(t, "two failed connects", discoverytest.Patience(t), func() bool {
		return c.metrics.connects.WithLabelValues("error").Value() >= 2
	})
	srv := discoverytest.Start(t, addr, nil)
	srv.Recv(t)
	srv.Send(full("v1", "n1", table("a.example")))
	if got := srv.Recv(t); got.GetVersionInfo() != "v1" {
		t.Fatalf("ack = %v", got)
	}
}

func TestRestartFromPersistedState(t *testing.T) {
	dir := t.TempDir()
	srv := discoverytest.Start(t, "127.0.0.1:0", nil)
	rec := &recorder{}
	ctx, cancel := context.WithCancel(context.Background())
	c1 := newClient(t, Config{Addrs: []string{srv.Addr}, Apply: rec.apply, StateDir: dir})
	done := make(chan error, 1)
	go func() { done <- c1.Run(ctx) }()
	srv.Recv(t)
	srv.Send(full("v1", "n1", table("a.example")))
	srv.Recv(t)
	srv.Send(delta("v2", "n2", "v1", []string{"b.example"}, nil))
	srv.Recv(t)
	cancel()
	<-done

	// A new agent process: no control plane reachable, yet Restore serves
	// the persisted v2 at once. It stops cleanly (else the next start
	// would take it for a death within v2's probation).
	rec2 := &recorder{}
	c2 := newClient(t, Config{Addrs: []string{deadAddr(t)}, Apply: rec2.apply, StateDir: dir})
	ok, err := c2.Restore()
	if err != nil || !ok {
		t.Fatalf("Restore = %v, %v; want true", ok, err)
	}
	runUntil(t, c2)()
	if diff := cmp.Diff([]string{"v2"}, rec2.versions); diff != "" {
		t.Errorf("restored versions (-want +got)\n%s", diff)
	}
	if diff := cmp.Diff([]string{"a.example", "b.example"}, rec2.names()); diff != "" {
		t.Errorf("restored names (-want +got)\n%s", diff)
	}
	select {
	case <-c2.Synced():
		t.Error("a restored table must not count as synced")
	default:
	}

	// Once a control plane answers, the stream resumes from v2.
	c3 := newClient(t, Config{Addrs: []string{srv.Addr}, Apply: rec2.apply, StateDir: dir})
	if ok, err := c3.Restore(); !ok || err != nil {
		t.Fatalf("Restore = %v, %v", ok, err)
	}
	runClient(t, c3)
	if v := srv.Recv(t).GetVersionInfo(); v != "v2" {
		t.Errorf("resume version_info = %q, want v2", v)
	}
	// The server resends v2 in full: ACKed and synced without building
	// the same table again, then a delta applies on top of it.
	srv.Send(full("v2", "n3", table("a.example", "b.example")))
	if ack := srv.Recv(t); ack.GetVersionInfo() != "v2" || ack.GetResponseNonce() != "n3" || ack.GetErrorDetail() != nil {
		t.Errorf("ack of the resent v2 = %v", ack)
	}
	<-c3.Synced()
	srv.Send(delta("v3", "n4", "v2", []string{"c.example"}, []string{"a.example"}))
	if ack := srv.Recv(t); ack.GetVersionInfo() != "v3" || ack.GetErrorDetail() != nil {
		t.Errorf("ack of delta v3 = %v", ack)
	}
	if diff := cmp.Diff([]string{"v2", "v2", "v3"}, rec2.versions); diff != "" {
		t.Errorf("applied versions (-want +got): the restores of c2 and c3, then v3 only\n%s", diff)
	}
	if diff := cmp.Diff([]string{"b.example", "c.example"}, rec2.names()); diff != "" {
		t.Errorf("names after the delta (-want +got)\n%s", diff)
	}
	v, cur := rec2.current(t)
	if v != "v3" || len(cur.GetTable()) != 2 || cur.GetTable()["c.example"].GetIps()[0] != "10.0.0.2" {
		t.Errorf("Current() = %s %v", v, cur)
	}
}

func TestRestoreRejectsBadState(t *testing.T) {
	tests := []struct {
		name    string
		content []byte
		wantErr string
	}{
		{name: "garbage", content: []byte("\xff\xff\xff"), wantErr: "parse state file"},
		{name: "no table", content: nil, wantErr: "holds no table"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			certtest.Write(t, dir, stateFile, tt.content)
			c, err := New(Config{Addrs: []string{"127.0.0.1:1"}, Apply: (&recorder{}).apply, StateDir: dir})
			if err != nil {
				t.Fatal(err)
			}
			ok, err := c.Restore()
			if ok || err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Restore = %v, %v; want error %q", ok, err, tt.wantErr)
			}
		})
	}
	t.Run("invalid table", func(t *testing.T) {
		dir := t.TempDir()
		wire, err := proto.Marshal(table("bad.example"))
		if err != nil {
			t.Fatal(err)
		}
		if err := saveState(dir, "v9", wire); err != nil {
			t.Fatal(err)
		}
		c, err := New(Config{Addrs: []string{"127.0.0.1:1"}, Apply: (&recorder{}).apply, StateDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := c.Restore(); ok || err == nil {
			t.Fatalf("Restore = %v, %v; want the Apply error", ok, err)
		}
		if v, _ := c.current(); v != "" {
			t.Errorf("current version %q after a rejected restore", v)
		}
	})
}

func TestMTLS(t *testing.T) {
	ca := certtest.NewCA(t, "meshdns-ca")
	rogue := certtest.NewCA(t, "rogue-ca")
	dir := t.TempDir()
	caFile := certtest.Write(t, dir, "ca.pem", ca.PEM)
	goodCert, goodKey := ca.Issue(t, "agent", false)
	badCert, badKey := rogue.Issue(t, "agent", false)
	srvCert, srvKey := ca.Issue(t, "controlplane", true)
	srv := discoverytest.Start(t, "127.0.0.1:0", certtest.ServerTLS(t, srvCert, srvKey, ca))

	tests := []struct {
		name     string
		cfg      Config
		accepted bool
	}{
		{
			name: "client certificate from the trusted CA",
			cfg: Config{CACert: caFile, TLSCert: certtest.Write(t, dir, "good.pem", goodCert),
				TLSKey: certtest.Write(t, dir, "good.key", goodKey)},
			accepted: true,
		},
		{
			name: "client certificate from another CA",
			cfg: Config{CACert: caFile, TLSCert: certtest.Write(t, dir, "bad.pem", badCert),
				TLSKey: certtest.Write(t, dir, "bad.key", badKey)},
		},
		{
			name: "no client certificate",
			cfg:  Config{CACert: caFile},
		},
		{
			name: "server not trusted by the agent",
			cfg: Config{CACert: certtest.Write(t, dir, "rogue-ca.pem", rogue.PEM),
				TLSCert: certtest.Write(t, dir, "good2.pem", goodCert), TLSKey: certtest.Write(t, dir, "good2.key", goodKey)},
		},
		{
			name: "plaintext to a TLS server",
			cfg:  Config{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &recorder{}
			tt.cfg.Addrs = []string{srv.Addr}
			tt.cfg.Apply = rec.apply
			tt.cfg.Registry = meshmetrics.NewRegistry()
			c := startClient(t, tt.cfg)
			if !tt.accepted {
				// Wait for the refusal itself (a loaded machine may take
				// longer than any fixed wait), then for nothing to arrive.
				testenv.Eventually(t, "a connect error", discoverytest.Patience(t), func() bool {
					return c.metrics.connects.WithLabelValues("error").Value() >= 1
				})
				srv.NoRecv(t, 700*time.Millisecond)
				return
			}
			srv.Recv(t)
			srv.Send(full("v1", "n1", table("a.example")))
			if got := srv.Recv(t); got.GetVersionInfo() != "v1" {
				t.Fatalf("ack = %v", got)
			}
			<-c.Synced()
		})
	}
}

// TestToken: the projected token goes with every stream, read again at
// each reconnect, so a token the kubelet rotated is the one presented.
func TestToken(t *testing.T) {
	ca := certtest.NewCA(t, "meshdns-ca")
	dir := t.TempDir()
	srvCert, srvKey := ca.Issue(t, "controlplane", true)
	srv := discoverytest.Start(t, "127.0.0.1:0", certtest.ServerTLS(t, srvCert, srvKey, nil))
	tokenFile := certtest.Write(t, dir, "token", []byte("first-token\n"))
	rec := &recorder{}
	startClient(t, Config{Addrs: []string{srv.Addr}, Apply: rec.apply, CACert: certtest.Write(t, dir, "ca.pem", ca.PEM),
		TokenFile: tokenFile, MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond})
	next := func() string {
		t.Helper()
		select {
		case a := <-srv.Authorization:
			return a
		case <-time.After(discoverytest.Patience(t)):
			t.Fatal("no stream before the test's deadline")
		}
		return ""
	}
	if got := next(); got != "Bearer first-token" {
		t.Fatalf("authorization %q, want the token", got)
	}
	srv.Recv(t)
	certtest.Write(t, dir, "token", []byte("rotated-token"))
	srv.DropStream()
	if got := next(); got != "Bearer rotated-token" {
		t.Fatalf("authorization after rotation %q, want the new token", got)
	}
}

func TestNewRejects(t *testing.T) {
	on := (&recorder{}).apply
	tests := []struct {
		name string
		cfg  Config
	}{
		{name: "no address", cfg: Config{Apply: on}},
		{name: "no callback", cfg: Config{Addrs: []string{"127.0.0.1:1"}}},
		{name: "token without TLS", cfg: Config{Addrs: []string{"127.0.0.1:1"}, Apply: on, TokenFile: "/var/run/token"}},
		{name: "cert without key", cfg: Config{Addrs: []string{"127.0.0.1:1"}, Apply: on, TLSCert: "c.pem"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := New(tt.cfg); err == nil {
				t.Fatal("want an error")
			}
		})
	}
}

func TestBackoff(t *testing.T) {
	lo, hi := 100*time.Millisecond, 2*time.Second
	tests := []struct {
		name   string
		n      int
		wantLo time.Duration
		wantHi time.Duration
	}{
		{name: "first", n: 0, wantLo: 50 * time.Millisecond, wantHi: 100 * time.Millisecond},
		{name: "third", n: 2, wantLo: 200 * time.Millisecond, wantHi: 400 * time.Millisecond},
		{name: "capped", n: 10, wantLo: time.Second, wantHi: 2 * time.Second},
		{name: "huge exponent", n: 100, wantLo: time.Second, wantHi: 2 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for range 100 {
				if d := backoff(lo, hi, tt.n); d < tt.wantLo || d > tt.wantHi {
					t.Fatalf("backoff(%d) = %v, want in [%v, %v]", tt.n, d, tt.wantLo, tt.wantHi)
				}
			}
		})
	}
}

// TestCertificateRotation replaces the client certificate files while the
// agent runs: the control plane refuses the old one, and the next reconnect
// reads the new files without a restart.
func TestCertificateRotation(t *testing.T) {
	ca := certtest.NewCA(t, "meshdns-ca")
	old := certtest.NewCA(t, "retired-ca")
	dir := t.TempDir()
	badCert, badKey := old.Issue(t, "agent", false)
	certFile := certtest.Write(t, dir, "tls.crt", badCert)
	keyFile := certtest.Write(t, dir, "tls.key", badKey)
	srvCert, srvKey := ca.Issue(t, "controlplane", true)
	srv := discoverytest.Start(t, "127.0.0.1:0", certtest.ServerTLS(t, srvCert, srvKey, ca))
	rec := &recorder{}
	c := startClient(t, Config{Addrs: []string{srv.Addr}, Apply: rec.apply,
		CACert: certtest.Write(t, dir, "ca.pem", ca.PEM), TLSCert: certFile, TLSKey: keyFile})
	srv.NoRecv(t, 500*time.Millisecond)

	goodCert, goodKey := ca.Issue(t, "agent", false)
	certtest.Write(t, dir, "tls.key", goodKey)
	certtest.Write(t, dir, "tls.crt", goodCert)
	srv.Recv(t)
	srv.Send(full("v1", "n1", table("a.example")))
	if got := srv.Recv(t); got.GetVersionInfo() != "v1" {
		t.Fatalf("ack = %v", got)
	}
	<-c.Synced()
}

// TestStateWriteFailureStillAcks: a state directory that cannot be written
// costs the restart shortcut, not the update: the table is applied and
// ACKed, and the failure is counted.
func TestStateWriteFailureStillAcks(t *testing.T) {
	notADir := certtest.Write(t, t.TempDir(), "file", []byte("x"))
	srv := discoverytest.Start(t, "127.0.0.1:0", nil)
	rec := &recorder{}
	c := startClient(t, Config{Addrs: []string{srv.Addr}, Apply: rec.apply, StateDir: notADir})
	srv.Recv(t)
	srv.Send(full("v1", "n1", table("a.example")))
	if got := srv.Recv(t); got.GetVersionInfo() != "v1" || got.GetErrorDetail() != nil {
		t.Fatalf("ack = %v", got)
	}
	if got := c.metrics.stateWrites.WithLabelValues("error").Value(); got != 1 {
		t.Errorf("state write errors = %v, want 1", got)
	}
}

// TestLargeTable streams a full table bigger than gRPC's default 4 MiB
// message limit, as a cluster with tens of thousands of services produces.
func TestLargeTable(t *testing.T) {
	srv := discoverytest.Start(t, "127.0.0.1:0", nil)
	rec := &recorder{}
	startClient(t, Config{Addrs: []string{srv.Addr}, Apply: rec.apply})
	big := &meshdnsv1.NameTable{Table: map[string]*meshdnsv1.NameInfo{}}
	const n = 30_000
	for i := range n {
		ip := func(j int) string { return fmt.Sprintf("fd00:%x::%x:%x", j, i>>8, i&255) }
		big.Table[fmt.Sprintf("service-%d.namespace-%d.svc.cluster.local", i, i%50)] = &meshdnsv1.NameInfo{
			Ips: []string{ip(1), ip(2), ip(3), ip(4)}, Registry: "Kubernetes",
			Ports: []*meshdnsv1.Port{{Name: "http", Port: 80, Protocol: "TCP"}, {Name: "grpc", Port: 9090, Protocol: "TCP"}}}
	}
	if size := proto.Size(big); size <= 4<<20 {
		t.Fatalf("table is %d bytes, not above the 4 MiB default", size)
	}
	srv.Recv(t)
	srv.Send(full("big", "n1", big))
	if got := srv.Recv(t); got.GetVersionInfo() != "big" || got.GetErrorDetail() != nil {
		t.Fatalf("ack = %v", got)
	}
	if got := len(rec.names()); got != n {
		t.Errorf("applied %d names, want %d", got, n)
	}
}

// TestResponseAboveMaxMessageSize: a response above MaxMessageSize is not
// read, let alone applied: the stream ends and the agent reconnects with
// the version it has.
func TestResponseAboveMaxMessageSize(t *testing.T) {
	srv := discoverytest.Start(t, "127.0.0.1:0", nil)
	rec := &recorder{}
	startClient(t, Config{Addrs: []string{srv.Addr}, Apply: rec.apply, MaxMessageSize: 1000})
	srv.Recv(t)
	srv.Send(full("v1", "n1", table("a.example")))
	if got := srv.Recv(t); got.GetVersionInfo() != "v1" || got.GetErrorDetail() != nil {
		t.Fatalf("ack = %v", got)
	}
	var names []string
	for i := range 100 {
		names = append(names, fmt.Sprintf("name-%d.example", i))
	}
	big := full("v2", "n2", table(names...))
	if proto.Size(big) <= 1000 {
		t.Fatalf("response of %d bytes is not above the limit", proto.Size(big))
	}
	srv.Send(big)
	got := srv.Recv(t)
	if got.GetIdentity() == nil || got.GetVersionInfo() != "v1" {
		t.Fatalf("after a response above the limit: %v, want a new stream's identity at v1", got)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if diff := cmp.Diff([]string{"v1"}, rec.versions); diff != "" {
		t.Errorf("applied versions (-want +got):\n%s", diff)
	}
}

// A full table that is not well formed is refused as it is received, with
// why (NACK), before a build; the stream goes on, the table applied stays,
// and the next good one is applied.
func TestMalformedFullTableNacked(t *testing.T) {
	srv := discoverytest.Start(t, "127.0.0.1:0", nil)
	rec := &recorder{}
	startClient(t, Config{Addrs: []string{srv.Addr}, Apply: rec.apply, StateDir: t.TempDir()})
	srv.Recv(t)
	srv.Send(full("v1", "n1", table("a.example")))
	if got := srv.Recv(t); got.GetVersionInfo() != "v1" || got.GetErrorDetail() != nil {
		t.Fatalf("ack v1 = %v", got)
	}
	bad := table("b.example")
	bad.ProtoReflect().SetUnknown([]byte{0x0b}) // field 1 as a group: no NameTable holds that
	srv.Send(full("v2", "n2", bad))
	got := srv.Recv(t)
	if got.GetVersionInfo() != "v1" || got.GetResponseNonce() != "n2" || !strings.Contains(got.GetErrorDetail().GetMessage(), "unsupported wire type") {
		t.Fatalf("answer to a malformed table = %v; want a NACK keeping v1 that says why", got)
	}
	srv.Send(full("v3", "n3", table("c.example")))
	if got := srv.Recv(t); got.GetVersionInfo() != "v3" || got.GetErrorDetail() != nil {
		t.Fatalf("ack v3 = %v", got)
	}
	if diff := cmp.Diff([]string{"v1", "v3"}, rec.versions); diff != "" {
		t.Errorf("applied versions (-want +got):\n%s", diff)
	}
}
