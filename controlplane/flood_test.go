package controlplane_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshdns/meshdns/controlplane/internal/cptest"
	"github.com/meshdns/meshdns/internal/testkit/buildtest"
	"github.com/meshdns/meshdns/internal/testkit/kubetest"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// meshdnsBuild is the control plane the flood runs against: the real
// binary, built without the race detector, whose shadow memory would
// make the RSS figures meaningless.
var meshdnsBuild = &buildtest.Binary{Pkg: "github.com/meshdns/meshdns/cmd/meshdns"}

// startControlPlane runs `meshdns controlplane` on the cluster of
// kubeconfig (Kubernetes source, TokenReview) and the entries in dir,
// plaintext gRPC on loopback, and waits until it is ready.
func startControlPlane(t *testing.T, kubeconfig, dir string) (grpcAddr string, pid int) {
	t.Helper()
	bin := meshdnsBuild.Path(t)
	t.Cleanup(meshdnsBuild.Remove)
	grpcAddr, admin := testenv.FreeAddr(t), testenv.FreeAddr(t)
	var logs testenv.Buffer
	cmd := exec.Command(bin, "controlplane", "--kubeconfig", kubeconfig, "--entries", dir,
		"--grpc-addr", grpcAddr, "--admin-addr", admin, "--log-level", "error")
	cmd.Stdout, cmd.Stderr = &logs, &logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	testenv.Eventually(t, "the control plane ready", 2*time.Minute, func() bool {
		res, err := http.Get("http://" + admin + "/healthz/ready")
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK
	})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("control plane log:\n%.4000s", logs.String())
		}
	})
	return grpcAddr, cmd.Process.Pid
}

// bogusToken is shaped like a projected token for meshdns (the audience,
// an expiry an hour ahead) with a made-up signature: the cheap checks let
// it through, so only the API server can refuse it, the worst garbage.
func bogusToken(i int64) string {
	enc := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	return enc(`{"alg":"RS256","kid":"x"}`) + "." +
		enc(fmt.Sprintf(`{"aud":["meshdns"],"exp":%d,"sub":"system:serviceaccount:x:default","jti":"%d"}`, time.Now().Add(time.Hour).Unix(), i)) +
		"." + enc("not a signature")
}

// flood opens rate bogus-token streams a second from source until ctx
// ends, each waiting at most a second for its refusal, and returns how
// many it opened.
func flood(ctx context.Context, t *testing.T, addr, source string, rate int) *atomic.Int64 {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(source)}}
	var conns []*grpc.ClientConn
	for range 4 {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) { return d.DialContext(ctx, "tcp", a) }))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		conns = append(conns, conn)
	}
	var opened atomic.Int64
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		inflight := make(chan struct{}, 2048) // bounds the flooder, not the rate
		start := time.Now()
		for n := int64(0); ; {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			// Paced by the clock, not the ticks, which a loaded machine
			// delivers late.
			due := int64(time.Since(start).Seconds()*float64(rate)) - n
			for range due {
				n++
				select {
				case inflight <- struct{}{}:
				default:
					continue // the refusals are late; the flood does not pile up
				}
				opened.Add(1)
				wg.Add(1)
				go func(i int64) {
					defer wg.Done()
					defer func() { <-inflight }()
					sctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+bogusToken(i)), time.Second)
					defer cancel()
					st, err := meshdnsv1.NewNameDiscoveryServiceClient(conns[i%int64(len(conns))]).StreamNameTable(sctx)
					if err != nil {
						return
					}
					_ = st.Send(&meshdnsv1.StreamNameTableRequest{Identity: &meshdnsv1.AgentIdentity{Namespace: "x", PodName: "p"}})
					_, _ = st.Recv()
				}(n)
			}
		}
	}()
	return &opened
}

// TestBogusTokenFlood runs a control plane (the meshdns binary) that
// verifies tokens with a real API server while one address opens 1,000
// streams a second with bogus tokens and 100 real agents, each with its
// pod-bound token and its own address, reconnect: every agent must get
// its table again (the test reports in how long; the bound is 10s on an
// idle machine, and the test waits up to 60s so a loaded one does not
// fail it), and the control plane's RSS must stay within 1.2x of its
// figure with the agents connected before the flood.
//
//	go test -run TestBogusTokenFlood -v ./controlplane/
func TestBogusTokenFlood(t *testing.T) {
	if testing.Short() {
		t.Skip("a real API server, 100 pods and a flood")
	}
	const agents, rate = 100, 1000
	c := kubetest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns := c.Namespace(t, "flood")
	tokens := make([]string, agents)
	pods := make([]string, agents)
	for i := range agents {
		pods[i] = fmt.Sprintf("web-%d", i)
		pod, err := c.Client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: pods[i]},
			Spec:       corev1.PodSpec{ServiceAccountName: "default", Containers: []corev1.Container{{Name: "app", Image: "app"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		tr, err := c.Client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "default", &authv1.TokenRequest{Spec: authv1.TokenRequestSpec{
			Audiences:      []string{"meshdns"},
			BoundObjectRef: &authv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		tokens[i] = tr.Status.Token
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "entries.yaml"),
		[]byte("zones: [corp.example]\nentries:\n  - {hostname: web.corp.example, addresses: [10.0.0.1]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	grpcAddr, cpPid := startControlPlane(t, c.Kubeconfig, dir)

	// Every agent dials from its own address, as pods do.
	dial := func(i int) *cptest.Agent {
		return cptest.Dial(t, grpcAddr, cptest.DialOpts{Namespace: ns, Pod: pods[i], Token: tokens[i],
			Source: fmt.Sprintf("127.0.1.%d", i+1)})
	}
	// connectAll dials every agent until it has a table (a refused one
	// dials again, as the agent's backoff would) and returns them.
	connectAll := func(within time.Duration) ([]*cptest.Agent, int) {
		as := make([]*cptest.Agent, agents)
		admitted := make(chan int, agents)
		deadline := time.Now().Add(within)
		for i := range agents {
			go func() {
				for time.Now().Before(deadline) {
					a := dial(i)
					select {
					case r, ok := <-a.Resps:
						if ok && r != nil {
							a.Ack(r)
							as[i] = a
							admitted <- i
							return
						}
					case <-time.After(within):
					}
					a.Close()
					time.Sleep(250 * time.Millisecond)
				}
				admitted <- -1
			}()
		}
		n := 0
		for range agents {
			if <-admitted >= 0 {
				n++
			}
		}
		return as, n
	}

	as, n := connectAll(time.Minute)
	if n != agents {
		t.Fatalf("%d of %d agents admitted before the flood", n, agents)
	}
	// Past the verdict cache (10s), so the reconnects are reviewed by the
	// API server again, as after a control plane restart.
	time.Sleep(9 * time.Second)
	idle := 0.0 // the most seen in 2s, sampled as the peak is
	for range 40 {
		idle = max(idle, rssBytes(t, cpPid))
		time.Sleep(50 * time.Millisecond)
	}

	fctx, stopFlood := context.WithCancel(ctx)
	defer stopFlood()
	opened := flood(fctx, t, grpcAddr, "127.0.0.2", rate)
	var peak atomic.Int64
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for fctx.Err() == nil {
			peak.Store(max(peak.Load(), int64(rssBytes(t, cpPid))))
			time.Sleep(50 * time.Millisecond)
		}
	}()
	time.Sleep(2 * time.Second) // the flood at full rate first
	for _, a := range as {
		a.Close()
	}
	start := time.Now()
	_, n = connectAll(time.Minute)
	took := time.Since(start)
	time.Sleep(2 * time.Second) // the flood goes on with the agents back
	floodFor := time.Since(start) + 2*time.Second
	stopFlood()
	<-sampled
	ratio := float64(peak.Load()) / idle
	t.Logf("%d of %d agents admitted again in %v under %d bogus-token streams (%.0f/s from one address); control plane RSS %.1f MiB idle, %.1f MiB peak (%.2fx)",
		n, agents, took.Round(time.Millisecond), opened.Load(), float64(opened.Load())/floodFor.Seconds(), idle/(1<<20), float64(peak.Load())/(1<<20), ratio)
	if n != agents {
		t.Errorf("%d of %d agents admitted under the flood", n, agents)
	}
	if ratio > 1.2 {
		t.Errorf("control plane RSS %.2fx its idle figure under the flood, want at most 1.2x", ratio)
	}
}
