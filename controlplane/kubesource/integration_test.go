package kubesource

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshdns/meshdns/controlplane/registry"
	"github.com/meshdns/meshdns/pkg/nametable"
)

// These tests run against a real kube-apiserver and etcd (internal/testkit/kubetest).
// No controllers run, so EndpointSlices are written by hand, the way the
// EndpointSlice controller would write them: an endpoint's hostname is set
// for a pod whose spec.hostname is set and whose spec.subdomain names the
// headless service.

func parseIPs(t testing.TB, ss []string) []netip.Addr {
	t.Helper()
	out := make([]netip.Addr, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParseAddr(s)
	}
	return out
}

func TestAPIServerServices(t *testing.T) {
	c := cluster.Get(t)
	ns := c.Namespace(t, "kubesource")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	svcs := c.Client.CoreV1().Services(ns)
	slicesAPI := c.Client.DiscoveryV1().EndpointSlices(ns)

	// A service that exists before the source starts is in the first
	// snapshot, together with the zone.
	pre, err := svcs.Create(ctx, clusterIPService(ns, "pre"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	src := newSource(t, Config{Client: restClientFor(t, c.Config), Namespaces: []string{ns}})
	rec := run(t, src)
	first := rec.wait(t, "first snapshot", func(registry.Snapshot) bool { return true })
	if diff := cmp.Diff([]string{"cluster.local"}, first.Zones); diff != "" {
		t.Errorf("zones (-want +got):\n%s", diff)
	}
	want := kubeEntry(ns, "pre")
	want.IPs = parseIPs(t, pre.Spec.ClusterIPs)
	want.Ports = []nametable.Port{{Name: "http", Port: 80, Protocol: "TCP"}}
	if diff := cmp.Diff([]registry.Entry{want}, first.Entries, entryOpts()); diff != "" {
		t.Errorf("first snapshot (-want +got):\n%s", diff)
	}

	host := func(name string) string { return name + "." + ns + ".svc.cluster.local" }
	var created *corev1.Service // the last service a step created, for want
	create := func(svc *corev1.Service) func() error {
		return func() error {
			var err error
			created, err = svcs.Create(ctx, svc, metav1.CreateOptions{})
			return err
		}
	}
	withIPs := func(name string) func(registry.Snapshot) bool {
		return func(s registry.Snapshot) bool {
			e, ok := find(s, host(name))
			return ok && created != nil && len(created.Spec.ClusterIPs) > 0 &&
				cmp.Equal(parseIPs(t, created.Spec.ClusterIPs), e.IPs, entryOpts())
		}
	}
	dual := corev1.IPFamilyPolicyRequireDualStack
	single := corev1.IPFamilyPolicySingleStack
	notReady := false

	steps := []struct {
		name   string
		change func() error
		want   func(registry.Snapshot) bool
		check  func(t *testing.T, s registry.Snapshot)
	}{
		{
			name: "dual-stack cluster IP",
			change: create(func() *corev1.Service {
				s := clusterIPService(ns, "dual")
				s.Spec.IPFamilyPolicy = &dual
				return s
			}()),
			want: withIPs("dual"),
			check: func(t *testing.T, s registry.Snapshot) {
				e, _ := find(s, host("dual"))
				if len(e.IPs) != 2 || !e.IPs[0].Is4() || !e.IPs[1].Is6() {
					t.Errorf("dual-stack IPs = %v, want one v4 then one v6", e.IPs)
				}
			},
		},
		{
			name: "IPv6-only cluster IP",
			change: create(func() *corev1.Service {
				s := clusterIPService(ns, "six")
				s.Spec.IPFamilyPolicy = &single
				s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol}
				return s
			}()),
			want: withIPs("six"),
			check: func(t *testing.T, s registry.Snapshot) {
				e, _ := find(s, host("six"))
				if len(e.IPs) != 1 || !e.IPs[0].Is6() {
					t.Errorf("IPs = %v, want one v6", e.IPs)
				}
			},
		},
		{
			name:   "headless service without slices",
			change: create(headlessService(ns, "db")),
			want: func(s registry.Snapshot) bool {
				_, ok := find(s, host("db"))
				return ok
			},
		},
		{
			name: "headless v4 and v6 slices with per-pod hostnames and a not-ready endpoint",
			change: func() error {
				if _, err := slicesAPI.Create(ctx, slice(ns, "db-v4", "db", discoveryv1.AddressTypeIPv4,
					ep{addrs: []string{"10.1.0.2"}, hostname: "db-0", ready: ptr(true)},
					ep{addrs: []string{"10.1.0.3"}, hostname: "db-1"},
					ep{addrs: []string{"10.1.0.4"}, ready: &notReady},
				), metav1.CreateOptions{}); err != nil {
					return err
				}
				_, err := slicesAPI.Create(ctx, slice(ns, "db-v6", "db", discoveryv1.AddressTypeIPv6,
					ep{addrs: []string{"fd00:1::2"}, hostname: "db-0"},
				), metav1.CreateOptions{})
				return err
			},
			want: hasEntry(func() registry.Entry {
				e := kubeEntry(ns, "db")
				e.Ports = []nametable.Port{{Name: "db", Port: 5432, Protocol: "TCP"}}
				e.Endpoints = []nametable.Endpoint{
					{Hostname: "db-0", IPs: addrs("10.1.0.2", "fd00:1::2")},
					{Hostname: "db-1", IPs: addrs("10.1.0.3")},
				}
				return e
			}()),
		},
		{
			name: "publishNotReadyAddresses shows the not-ready endpoint",
			change: func() error {
				s, err := svcs.Get(ctx, "db", metav1.GetOptions{})
				if err != nil {
					return err
				}
				s.Spec.PublishNotReadyAddresses = true
				_, err = svcs.Update(ctx, s, metav1.UpdateOptions{})
				return err
			},
			want: func(s registry.Snapshot) bool {
				e, _ := find(s, host("db"))
				return len(e.Endpoints) == 3 && slices.ContainsFunc(e.Endpoints, func(x nametable.Endpoint) bool {
					return x.Hostname == "" && slices.Equal(x.IPs, addrs("10.1.0.4"))
				})
			},
		},
		{
			name:   "external name",
			change: create(externalNameService(ns, "ext", "db.example.com")),
			want: func(s registry.Snapshot) bool {
				e, ok := find(s, host("ext"))
				return ok && e.CanonicalName == "db.example.com" && len(e.IPs) == 0
			},
		},
		{
			name: "external name becomes cluster IP",
			change: func() error {
				s, err := svcs.Get(ctx, "ext", metav1.GetOptions{})
				if err != nil {
					return err
				}
				s.Spec.Type = corev1.ServiceTypeClusterIP
				s.Spec.ExternalName = ""
				s.Spec.Ports = []corev1.ServicePort{{Name: "http", Port: 80}}
				created, err = svcs.Update(ctx, s, metav1.UpdateOptions{})
				return err
			},
			want: func(s registry.Snapshot) bool {
				e, _ := find(s, host("ext"))
				return e.CanonicalName == "" && withIPs("ext")(s)
			},
		},
		{
			name: "export-to annotation",
			change: func() error {
				s, err := svcs.Get(ctx, "dual", metav1.GetOptions{})
				if err != nil {
					return err
				}
				s.Annotations = map[string]string{AnnotationExportTo: "frontend, .,NOT_A_NS"}
				_, err = svcs.Update(ctx, s, metav1.UpdateOptions{})
				return err
			},
			want: func(s registry.Snapshot) bool {
				e, _ := find(s, host("dual"))
				return slices.Equal(e.Namespaces, slices.Sorted(slices.Values([]string{"frontend", ns})))
			},
		},
		{
			name:   "slice deleted",
			change: func() error { return slicesAPI.Delete(ctx, "db-v6", metav1.DeleteOptions{}) },
			want: func(s registry.Snapshot) bool {
				e, _ := find(s, host("db"))
				return len(e.Endpoints) == 3 && !slices.ContainsFunc(e.Endpoints, func(x nametable.Endpoint) bool { return len(x.IPs) > 1 })
			},
		},
		{
			name:   "service deleted",
			change: func() error { return svcs.Delete(ctx, "six", metav1.DeleteOptions{}) },
			want:   lacks(host("six")),
		},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			before := time.Now()
			if err := st.change(); err != nil {
				t.Fatal(err)
			}
			s := rec.wait(t, st.name, st.want)
			if s.Changed.Before(before) || s.Changed.After(time.Now()) {
				t.Errorf("Changed = %v, want between the write (%v) and now", s.Changed, before)
			}
			if diff := cmp.Diff([]string{"cluster.local"}, s.Zones); diff != "" {
				t.Errorf("zones (-want +got):\n%s", diff)
			}
			if st.check != nil {
				st.check(t, s)
			}
		})
	}
	if got := testutil.ToFloat64(src.m.annotations); got < 1 {
		t.Errorf("invalid annotation counter = %v, want >= 1", got)
	}
}

// TestAPIServerLabelSelector watches every namespace, limited by a label:
// unlabelled services never appear, and removing the label removes the
// name.
func TestAPIServerLabelSelector(t *testing.T) {
	c := cluster.Get(t)
	ns := c.Namespace(t, "selector")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	svcs := c.Client.CoreV1().Services(ns)

	src := newSource(t, Config{Client: restClientFor(t, c.Config), LabelSelector: "meshdns.io/watch=yes", ClusterDomain: "example.internal"})
	rec := run(t, src)
	rec.wait(t, "first snapshot", func(registry.Snapshot) bool { return true })

	labelled := clusterIPService(ns, "seen")
	labelled.Labels = map[string]string{"meshdns.io/watch": "yes"}
	if _, err := svcs.Create(ctx, clusterIPService(ns, "unseen"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := svcs.Create(ctx, labelled, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	s := rec.wait(t, "labelled service", func(s registry.Snapshot) bool {
		_, ok := find(s, "seen."+ns+".svc.example.internal")
		return ok
	})
	if _, ok := find(s, "unseen."+ns+".svc.example.internal"); ok {
		t.Errorf("unlabelled service in the snapshot")
	}
	if _, ok := find(s, "kubernetes.default.svc.example.internal"); ok {
		t.Errorf("the unlabelled default/kubernetes service is in the snapshot")
	}

	got, err := svcs.Get(ctx, "seen", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got.Labels = nil
	if _, err := svcs.Update(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	rec.wait(t, "unlabelled service gone", lacks("seen."+ns+".svc.example.internal"))
}
