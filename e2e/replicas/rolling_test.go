package replicas

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/yaml"

	"github.com/meshdns/meshdns/internal/testkit/kubetest"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

const (
	systemNS    = "meshdns-system"
	serviceName = "meshdns-controlplane"
	agentName   = "meshdns-agent" // the injected sidecar's container
	// sliceAddress stands for 127.0.0.1 in the EndpointSlices, which
	// refuse loopback addresses; the balancer dials 127.0.0.1 at the
	// slice's port. A documentation address (RFC 5737): never dialled.
	sliceAddress = "192.0.2.1"
)

// TestRollingRestartInjects rolls the control plane while pods are being
// created in a labelled namespace, and checks every one of them was
// injected. The parts are real: the API server calls the webhook of the
// shipped MutatingWebhookConfiguration (failurePolicy Ignore, so a failed
// call admits the pod bare), the replicas are `meshdns controlplane`
// processes with the install's drain flags, each its own "pod" (POD_NAME),
// and a balancer in the test plays the Service: it follows the Service's
// EndpointSlices through the API server, as kube-proxy does, and sends each
// new connection to a ready endpoint. The test plays the Deployment
// (maxSurge 1, maxUnavailable 0: a new replica ready before an old one is
// told to stop) and the endpoint controller (a stopping replica's endpoint
// turns not ready), in that order, so the old replica gets SIGTERM while
// the balancer still sends it calls (until 20 more pods were created).
// Nothing waits on a clock: each step waits for the event it needs, and
// pods are created until the last old replica has exited. Without the
// drain (--drain-timeout 0) the same test finds pods admitted bare.
func TestRollingRestartInjects(t *testing.T) {
	c := kubetest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cs := c.Client
	for name, labels := range map[string]map[string]string{systemNS: nil, "apps": {"meshdns.io/inject": "enabled"}} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	template := filepath.Join(t.TempDir(), "template.yaml")
	if err := os.WriteFile(template, []byte("image: ghcr.io/meshdns/meshdns:test\ncontrolPlane: meshdns-controlplane.meshdns-system.svc:15012\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	lb := startBalancer(ctx, t, c)
	registerWebhook(ctx, t, c, "https://"+lb.addr)

	replicas := []*webhookReplica{startWebhookReplica(ctx, t, c, "cp-0", template), startWebhookReplica(ctx, t, c, "cp-1", template)}
	testenv.Eventually(t, "a pod created through the balancer injected", time.Minute, func() bool {
		p, err := cs.CoreV1().Pods("apps").Create(ctx, plainPod("probe"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil && injected(p)
	})

	// The creator: one pod after another until told to stop, counting
	// those created while an old replica was draining.
	var draining, whileDraining, count atomic.Int32
	stop := make(chan struct{})
	var created []string
	var createErr error
	var createFailed atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			d := draining.Load() > 0
			p, err := cs.CoreV1().Pods("apps").Create(ctx, plainPod(fmt.Sprintf("app-%d", i)), metav1.CreateOptions{})
			if err != nil {
				createErr = err
				createFailed.Store(true)
				return
			}
			created = append(created, p.Name)
			count.Add(1)
			if d && draining.Load() > 0 {
				whileDraining.Add(1)
			}
		}
	}()

	for i := range replicas {
		next := startWebhookReplica(ctx, t, c, fmt.Sprintf("cp-%d", len(replicas)+i), template)
		// The worst case first: the old replica the API server's (HTTP/2)
		// connection goes to, which it will have to leave.
		rest := replicas[i:]
		sort.SliceStable(rest, func(a, b int) bool { return lb.active.Get(rest[a].name) > lb.active.Get(rest[b].name) })
		old := replicas[i]
		t.Logf("stopping %s with %d API server connections", old.name, lb.active.Get(old.name))
		start := time.Now()
		draining.Add(1)
		old.terminate(t)
		// The endpoint controller and kube-proxy follow the pod's deletion
		// a moment later: until then the old replica still gets calls.
		// The moment is counted in pods, not time: 20 created since.
		since := count.Load()
		testenv.Eventually(t, "20 pods created since the SIGTERM", time.Minute, func() bool { return count.Load() >= since+20 || createFailed.Load() })
		setEndpointReady(ctx, t, c, old.name, false)
		<-old.done
		draining.Add(-1)
		if err := cs.DiscoveryV1().EndpointSlices(systemNS).Delete(ctx, old.name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s drained and stopped %v after SIGTERM (exit: %v); %s serves", old.name, time.Since(start).Round(time.Millisecond), old.err, next.name)
		if old.err != nil {
			t.Errorf("%s exited with %v after SIGTERM, want a clean stop after its drain", old.name, old.err)
		}
	}
	close(stop)
	wg.Wait()
	if createErr != nil {
		t.Fatalf("create pod: %v", createErr)
	}

	var bare []string
	for _, name := range created {
		p, err := cs.CoreV1().Pods("apps").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !injected(p) {
			bare = append(bare, name)
		}
	}
	t.Logf("rolling restart of 2 replicas: %d pods created, %d while an old replica drained, %d not injected", len(created), whileDraining.Load(), len(bare))
	if len(bare) > 0 {
		t.Errorf("%d of %d pods created during the rolling restart were admitted without the agent: %v", len(bare), len(created), bare)
	}
	if whileDraining.Load() == 0 {
		t.Errorf("no pod was created while an old replica drained: the test proved nothing")
	}
}

// webhookReplica is one control plane process serving the webhook, as one
// pod of the Deployment: POD_NAME and POD_NAMESPACE set, the install's
// --drain-timeout, and an EndpointSlice of its own in the Service.
type webhookReplica struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error // the process's exit, once done is closed
}

func startWebhookReplica(ctx context.Context, t *testing.T, c *kubetest.Cluster, name, template string) *webhookReplica {
	t.Helper()
	admin, hook := testenv.FreeAddr(t), testenv.FreeAddr(t)
	r := &webhookReplica{name: name, done: make(chan struct{})}
	r.cmd = exec.Command(buildMeshdns(t), "controlplane", "--kubeconfig", c.Kubeconfig,
		"--insecure-allow-unauthenticated", "--grpc-addr", testenv.FreeAddr(t), "--admin-addr", admin,
		"--webhook-addr", hook, "--webhook-secret", systemNS+"/meshdns-webhook-certs", "--webhook-dns-names", "127.0.0.1",
		"--inject-template", template, "--drain-timeout", "25s", "--drain-service", serviceName, "--log-level", "warn")
	r.cmd.Env = append(os.Environ(), "POD_NAME="+name, "POD_NAMESPACE="+systemNS)
	r.cmd.Stderr = os.Stderr
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { r.err = r.cmd.Wait(); close(r.done) }()
	t.Cleanup(func() { _ = r.cmd.Process.Kill(); <-r.done })
	testenv.Eventually(t, name+" ready", time.Minute, func() bool {
		select {
		case <-r.done:
			t.Fatalf("%s exited: %v", name, r.err)
		default:
		}
		resp, err := httpGet(ctx, "http://"+admin+"/healthz/ready")
		return err == nil && resp == 200
	})
	// Ready: the endpoint controller adds it to the Service.
	_, portText, _ := net.SplitHostPort(hook)
	port, _ := strconv.Atoi(portText)
	p32, ready, proto := int32(port), true, corev1.ProtocolTCP
	if _, err := c.Client.DiscoveryV1().EndpointSlices(systemNS).Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: serviceName}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{sliceAddress}, Conditions: discoveryv1.EndpointConditions{Ready: &ready},
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: systemNS, Name: name}}},
		Ports: []discoveryv1.EndpointPort{{Port: &p32, Protocol: &proto}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return r
}

// terminate is the kubelet stopping the pod: SIGTERM.
func (r *webhookReplica) terminate(t *testing.T) {
	t.Helper()
	if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
}

// setEndpointReady sets the ready condition of the replica's endpoint (the
// endpoint controller turns a terminating pod's endpoint not ready).
func setEndpointReady(ctx context.Context, t *testing.T, c *kubetest.Cluster, name string, ready bool) {
	t.Helper()
	slices := c.Client.DiscoveryV1().EndpointSlices(systemNS)
	s, err := slices.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	terminating := !ready
	s.Endpoints[0].Conditions = discoveryv1.EndpointConditions{Ready: &ready, Terminating: &terminating}
	if _, err := slices.Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// balancer is the Service of the control plane.
type balancer struct {
	addr   string
	active counts // open connections by backend (EndpointSlice name)
}

// startBalancer plays the Service on a loopback port: it watches the
// Service's EndpointSlices and sends each new connection to the next ready
// endpoint in turn, as kube-proxy's rules do (after its own watch delay).
func startBalancer(ctx context.Context, t *testing.T, c *kubetest.Cluster) *balancer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &balancer{addr: l.Addr().String()}
	var mu sync.Mutex
	backends := map[string]string{} // slice name -> address of its ready endpoint
	set := func(s *discoveryv1.EndpointSlice, deleted bool) {
		mu.Lock()
		defer mu.Unlock()
		delete(backends, s.Name)
		if !deleted && len(s.Endpoints) > 0 && len(s.Ports) > 0 {
			if e := s.Endpoints[0]; e.Conditions.Ready == nil || *e.Conditions.Ready {
				backends[s.Name] = net.JoinHostPort("127.0.0.1", strconv.Itoa(int(*s.Ports[0].Port)))
			}
		}
	}
	slices := c.Client.DiscoveryV1().EndpointSlices(systemNS)
	opts := metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + serviceName}
	var wg sync.WaitGroup
	t.Cleanup(func() { l.Close(); wg.Wait() })
	wg.Add(2)
	go func() { // list, then watch from there; again when the watch ends or fails
		defer wg.Done()
		for ctx.Err() == nil {
			list, err := slices.List(ctx, opts)
			if err != nil {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			mu.Lock()
			clear(backends)
			mu.Unlock()
			for i := range list.Items {
				set(&list.Items[i], false)
			}
			o := opts
			o.ResourceVersion = list.ResourceVersion
			w, err := slices.Watch(ctx, o)
			if err != nil {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			for ev := range w.ResultChan() {
				s, ok := ev.Object.(*discoveryv1.EndpointSlice)
				if !ok { // an error: list and watch again
					break
				}
				set(s, ev.Type == watch.Deleted)
			}
			w.Stop()
		}
	}()
	go func() {
		defer wg.Done()
		var n int
		for {
			front, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			var names []string
			for name := range backends {
				names = append(names, name)
			}
			mu.Unlock()
			if len(names) == 0 {
				front.Close() // no endpoint: refused, as a Service without endpoints
				continue
			}
			sort.Strings(names)
			n++
			name := names[n%len(names)]
			mu.Lock()
			addr := backends[name]
			mu.Unlock()
			back, err := net.Dial("tcp", addr)
			if err != nil {
				front.Close()
				continue
			}
			b.active.Add(name, 1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				splice(front, back)
				b.active.Add(name, -1)
			}()
		}
	}()
	return b
}

// counts is a set of counters by name, safe for concurrent use.
type counts struct {
	mu sync.Mutex
	m  map[string]int
}

func (c *counts) Add(name string, d int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]int{}
	}
	c.m[name] += d
}

func (c *counts) Get(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[name]
}

// splice copies both ways until either side ends, then closes both.
func splice(a, b net.Conn) {
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) { _, _ = io.Copy(dst, src); done <- struct{}{} }
	go cp(a, b)
	go cp(b, a)
	<-done
	a.Close()
	b.Close()
	<-done
}

// registerWebhook creates the shipped webhook configuration pointed at the
// balancer by URL (no Service routes here), without a caBundle: the
// replicas write it, as in a fresh install.
func registerWebhook(ctx context.Context, t *testing.T, c *kubetest.Cluster, base string) {
	t.Helper()
	data, err := os.ReadFile("../../examples/kubernetes/40-webhook.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var mwc admissionregistrationv1.MutatingWebhookConfiguration
	if err := yaml.UnmarshalStrict(data, &mwc); err != nil {
		t.Fatal(err)
	}
	for i := range mwc.Webhooks {
		cc := &mwc.Webhooks[i].ClientConfig
		u := base + *cc.Service.Path
		cc.Service, cc.URL = nil, &u
	}
	if _, err := c.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, &mwc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// plainPod is an application pod as a workload creates it. The
// ServiceAccount is named as the admission plugin (off here) would set it:
// the agent's projected token needs one.
func plainPod(name string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{ServiceAccountName: "default", Containers: []corev1.Container{{Name: "app", Image: "app"}}}}
}

func injected(p *corev1.Pod) bool {
	for _, c := range p.Spec.InitContainers {
		if c.Name == agentName {
			return true
		}
	}
	return false
}

// httpGet returns the status code of a GET of url.
func httpGet(ctx context.Context, url string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}
