package kube

import (
	"context"
	"net"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshdns/meshdns/controlplane/kubesource"
	"github.com/meshdns/meshdns/e2e/internal/kubestack"
	"github.com/meshdns/meshdns/internal/testkit/kubetest"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

const externalIP = "198.51.100.7" // TEST-NET-2; only the test upstream knows it

// startUpstream runs a DNS server on 127.0.0.1:0 that answers A for
// names under example.org with externalIP and NXDOMAIN for the rest, and
// counts the questions it gets.
func startUpstream(t testing.TB) (addr string, asked func(name string) int) {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	seen := make(chan string, 1024)
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		q := r.Question[0]
		select {
		case seen <- strings.ToLower(q.Name):
		default:
		}
		if dns.IsSubDomain("example.org.", q.Name) {
			if q.Qtype == dns.TypeA {
				rr, _ := dns.NewRR(q.Name + " 60 IN A " + externalIP)
				m.Answer = append(m.Answer, rr)
			}
		} else {
			m.Rcode = dns.RcodeNameError
		}
		_ = w.WriteMsg(m)
	})}
	testenv.Serve(t, srv)
	counts := map[string]int{}
	return pc.LocalAddr().String(), func(name string) int {
		for {
			select {
			case n := <-seen:
				counts[n]++
			default:
				return counts[strings.ToLower(dns.Fqdn(name))]
			}
		}
	}
}

// stack is the control plane and one agent, wired to the API server.
type stack struct {
	dns string // agent's UDP address
	reg *prometheus.Registry
}

func startStack(t *testing.T, c *kubetest.Cluster, podNS, upstream string) *stack {
	t.Helper()
	st := kubestack.Start(t, c, podNS, upstream, 0)
	return &stack{dns: st.DNS, reg: st.Registry}
}

// ask sends one question over UDP and returns the reply.
func (s *stack) ask(t testing.TB, name string, qtype uint16) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	m.SetEdns0(1232, false)
	c := &dns.Client{Net: "udp", Timeout: 2 * time.Second}
	var err error
	for range 3 {
		var r *dns.Msg
		if r, _, err = c.Exchange(m, s.dns); err == nil {
			return r
		}
	}
	t.Fatalf("%s %s: %v", name, dns.TypeToString[qtype], err)
	return nil
}

// answer is a reply in a comparable form: the rcode, then the answer
// records' types and data, sorted (answers are shuffled).
func answer(r *dns.Msg) string {
	var rrs []string
	for _, rr := range r.Answer {
		f := strings.Fields(rr.String())
		rrs = append(rrs, strings.Join(f[3:], " "))
	}
	sort.Strings(rrs)
	return dns.RcodeToString[r.Rcode] + " " + strings.Join(rrs, "; ")
}

// await asks until the answer is want, and returns how long it took.
func (s *stack) await(t testing.TB, name string, qtype uint16, want string) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := start.Add(20 * time.Second)
	var got string
	for time.Now().Before(deadline) {
		if got = answer(s.ask(t, name, qtype)); got == want {
			return time.Since(start)
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("%s %s: got %q, want %q", name, dns.TypeToString[qtype], got, want)
	return 0
}

func (s *stack) histogramCount(t testing.TB, name string) uint64 {
	t.Helper()
	mfs, err := s.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			var n uint64
			for _, m := range mf.GetMetric() {
				n += histogram(m).GetSampleCount()
			}
			return n
		}
	}
	return 0
}

func histogram(m *dto.Metric) *dto.Histogram { return m.GetHistogram() }

func endpointSlice(ns, name, service string, family discoveryv1.AddressType, eps map[string]string) *discoveryv1.EndpointSlice {
	port, portName, proto := int32(5432), "db", corev1.ProtocolTCP
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
			Labels: map[string]string{discoveryv1.LabelServiceName: service}},
		AddressType: family,
		Ports:       []discoveryv1.EndpointPort{{Name: &portName, Port: &port, Protocol: &proto}},
	}
	hosts := make([]string, 0, len(eps))
	for h := range eps {
		hosts = append(hosts, h)
	}
	slices.Sort(hosts)
	for _, h := range hosts {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{eps[h]}, Hostname: &h})
	}
	return s
}

var cluster = kubetest.NewShared()

func TestMain(m *testing.M) { cluster.Main(m) }

// TestKubernetesEndToEnd: Services and EndpointSlices written to the API
// server become DNS answers of an agent, and changes and deletions show in
// its answers.
func TestKubernetesEndToEnd(t *testing.T) {
	c := cluster.Get(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	app := c.Namespace(t, "app")   // the pod's namespace
	other := c.Namespace(t, "lib") // a second namespace
	svcs := c.Client.CoreV1().Services(app)
	create := func(ns string, svc *corev1.Service) *corev1.Service {
		t.Helper()
		got, err := c.Client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create %s/%s: %v", ns, svc.Name, err)
		}
		return got
	}
	dual := corev1.IPFamilyPolicyRequireDualStack
	web := create(app, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec:       corev1.ServiceSpec{IPFamilyPolicy: &dual, Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
	})
	create(app, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "db"},
		Spec:       corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Name: "db", Port: 5432}}},
	})
	if _, err := c.Client.DiscoveryV1().EndpointSlices(app).Create(ctx,
		endpointSlice(app, "db-1", "db", discoveryv1.AddressTypeIPv4, map[string]string{"db-0": "10.1.0.10", "db-1": "10.1.0.11"}),
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	create(app, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "ext"},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "ext.example.org"},
	})
	open := create(other, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "open"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
	})
	create(other, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "private", Annotations: map[string]string{kubesource.AnnotationExportTo: "."}},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
	})

	upstream, asked := startUpstream(t)
	s := startStack(t, c, app, upstream)
	fqdn := func(name, ns string) string { return name + "." + ns + ".svc.cluster.local." }
	v4, v6 := web.Spec.ClusterIPs[0], web.Spec.ClusterIPs[1]

	t.Run("initial answers", func(t *testing.T) {
		s.await(t, fqdn("web", app), dns.TypeA, "NOERROR A "+v4)
		tests := []struct {
			name  string
			qname string
			qtype uint16
			want  string
		}{
			{name: "dual-stack A", qname: fqdn("web", app), qtype: dns.TypeA, want: "NOERROR A " + v4},
			{name: "dual-stack AAAA", qname: fqdn("web", app), qtype: dns.TypeAAAA, want: "NOERROR AAAA " + v6},
			{name: "short name in the pod's namespace", qname: "web.", qtype: dns.TypeA, want: "NOERROR A " + v4},
			{name: "svc.ns", qname: "web." + app + ".", qtype: dns.TypeA, want: "NOERROR A " + v4},
			{name: "SRV of a named port", qname: "_http._tcp." + fqdn("web", app), qtype: dns.TypeSRV,
				want: "NOERROR SRV 0 100 80 " + fqdn("web", app)}, // priority 0, weight 100/n, as CoreDNS
			{name: "headless: every ready endpoint", qname: fqdn("db", app), qtype: dns.TypeA, want: "NOERROR A 10.1.0.10; A 10.1.0.11"},
			{name: "headless: per-pod hostname", qname: "db-1." + fqdn("db", app), qtype: dns.TypeA, want: "NOERROR A 10.1.0.11"},
			{name: "ExternalName: CNAME chased upstream", qname: fqdn("ext", app), qtype: dns.TypeA,
				want: "NOERROR A " + externalIP + "; CNAME ext.example.org."},
			{name: "service of another namespace", qname: fqdn("open", other), qtype: dns.TypeA, want: "NOERROR A " + open.Spec.ClusterIP},
			{name: "exported only to its own namespace", qname: fqdn("private", other), qtype: dns.TypeA, want: "NXDOMAIN "},
			{name: "unknown name in the cluster zone", qname: fqdn("nosuch", app), qtype: dns.TypeA, want: "NXDOMAIN "},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				if got := answer(s.ask(t, tt.qname, tt.qtype)); got != tt.want {
					t.Errorf("%s %s = %q, want %q", tt.qname, dns.TypeToString[tt.qtype], got, tt.want)
				}
			})
		}
		if n := asked(fqdn("nosuch", app)); n != 0 {
			t.Errorf("upstream asked %d times for an unknown cluster name; the zone should be answered locally", n)
		}
	})

	var latencies []time.Duration
	t.Run("changes", func(t *testing.T) {
		steps := []struct {
			name   string
			change func() error
			qname  string
			qtype  uint16
			want   string
		}{
			{
				name: "endpoint added",
				change: func() error {
					_, err := c.Client.DiscoveryV1().EndpointSlices(app).Update(ctx, endpointSlice(app, "db-1", "db", discoveryv1.AddressTypeIPv4,
						map[string]string{"db-0": "10.1.0.10", "db-1": "10.1.0.11", "db-2": "10.1.0.12"}), metav1.UpdateOptions{})
					return err
				},
				qname: "db-2." + fqdn("db", app), qtype: dns.TypeA, want: "NOERROR A 10.1.0.12",
			},
			{
				name: "new service",
				change: func() error {
					_, err := svcs.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "late"},
						Spec: corev1.ServiceSpec{ClusterIP: "10.96.77.77", Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}, metav1.CreateOptions{})
					return err
				},
				qname: fqdn("late", app), qtype: dns.TypeA, want: "NOERROR A 10.96.77.77",
			},
			{
				name: "ExternalName becomes ClusterIP",
				change: func() error {
					svc, err := svcs.Get(ctx, "ext", metav1.GetOptions{})
					if err != nil {
						return err
					}
					svc.Spec.Type, svc.Spec.ExternalName, svc.Spec.ClusterIP = corev1.ServiceTypeClusterIP, "", "10.96.88.88"
					svc.Spec.Ports = []corev1.ServicePort{{Name: "http", Port: 80}}
					_, err = svcs.Update(ctx, svc, metav1.UpdateOptions{})
					return err
				},
				qname: fqdn("ext", app), qtype: dns.TypeA, want: "NOERROR A 10.96.88.88",
			},
			{
				name: "export-to opened to the pod's namespace",
				change: func() error {
					svc, err := c.Client.CoreV1().Services(other).Get(ctx, "private", metav1.GetOptions{})
					if err != nil {
						return err
					}
					svc.Annotations[kubesource.AnnotationExportTo] = ".," + app
					_, err = c.Client.CoreV1().Services(other).Update(ctx, svc, metav1.UpdateOptions{})
					return err
				},
				qname: fqdn("private", other), qtype: dns.TypeA, want: "", // any NOERROR A
			},
			{
				name:   "service deleted",
				change: func() error { return svcs.Delete(ctx, "web", metav1.DeleteOptions{}) },
				qname:  fqdn("web", app), qtype: dns.TypeA, want: "NXDOMAIN ",
			},
			{
				name: "slice deleted",
				change: func() error {
					return c.Client.DiscoveryV1().EndpointSlices(app).Delete(ctx, "db-1", metav1.DeleteOptions{})
				},
				qname: fqdn("db", app), qtype: dns.TypeA, want: "NXDOMAIN ", // a headless service without ready endpoints
			},
		}
		for _, st := range steps {
			t.Run(st.name, func(t *testing.T) {
				if err := st.change(); err != nil {
					t.Fatal(err)
				}
				want := st.want
				if want == "" {
					svc, err := c.Client.CoreV1().Services(other).Get(ctx, "private", metav1.GetOptions{})
					if err != nil {
						t.Fatal(err)
					}
					want = "NOERROR A " + svc.Spec.ClusterIP
				}
				latencies = append(latencies, s.await(t, st.qname, st.qtype, want))
			})
		}
	})
	if len(latencies) > 0 {
		slices.Sort(latencies)
		t.Logf("API write to changed DNS answer: min %v, median %v, max %v over %d changes (registry debounce 20ms, source coalescing 20ms)",
			latencies[0], latencies[len(latencies)/2], latencies[len(latencies)-1], len(latencies))
	}
	if n := s.histogramCount(t, "meshdns_controlplane_dns_programming_duration_seconds"); n == 0 {
		t.Errorf("the DNS programming latency histogram has no samples after %d changes", len(latencies))
	}
}
