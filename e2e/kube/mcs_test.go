package kube

import (
	"context"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/meshdns/meshdns/controlplane/mcssource"
	"github.com/meshdns/meshdns/controlplane/registry"
	"github.com/meshdns/meshdns/e2e/internal/kubestack"
	"github.com/meshdns/meshdns/internal/testkit/kubetest"
)

var importGVR = schema.GroupVersionResource{Group: mcssource.Group, Version: mcssource.Version, Resource: mcssource.Resource}

func serviceImport(ns, name, typ string, ips []string, port int64) *unstructured.Unstructured {
	return kubestack.ServiceImport(ns, name, typ, ips, []any{map[string]any{"name": "http", "port": port, "protocol": "TCP"}})
}

// TestMultiClusterEndToEnd: clusterset.local names follow the ServiceImport
// CRD and the imports written to the API server, over real DNS from an
// agent fed by the control plane over real gRPC.
func TestMultiClusterEndToEnd(t *testing.T) {
	c := cluster.Get(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns := c.Namespace(t, "mcs")
	client, err := mcssource.NewClientForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	// A short recheck: the CRD's arrival and removal are found by asking
	// discovery, at this period.
	src, err := mcssource.New(mcssource.Config{Client: client, Recheck: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	upstream, asked := startUpstream(t)
	st := kubestack.StartWith(t, c, "app-mcs", upstream, kubestack.Options{Sources: []registry.Source{src}})
	s := &stack{dns: st.DNS, reg: st.Registry}
	web := "web." + ns + ".svc.clusterset.local"

	// Without the CRD the zone is not ours: the name goes upstream.
	s.await(t, web, dns.TypeA, "NXDOMAIN ")
	if asked(web) == 0 {
		t.Fatalf("%s without the ServiceImport CRD was answered locally, want forwarded", web)
	}

	dyn, crd := kubestack.InstallServiceImportCRD(t, c)
	imports := dyn.Resource(importGVR).Namespace(ns)
	kubestack.CreateServiceImport(ctx, t, dyn, serviceImport(ns, "web", "ClusterSetIP", []string{"10.200.0.1"}, 80))
	s.await(t, web, dns.TypeA, "NOERROR A 10.200.0.1")
	s.await(t, "_http._tcp."+web, dns.TypeSRV, "NOERROR SRV 0 100 80 "+web+".")
	// The zone is authoritative now: an unknown name is NXDOMAIN here.
	nope := "nope." + ns + ".svc.clusterset.local"
	s.await(t, nope, dns.TypeA, "NXDOMAIN ")
	if n := asked(nope); n != 0 {
		t.Errorf("%s went upstream %d times with the CRD installed", nope, n)
	}
	// No short forms: svc.ns is the cluster-local service.
	s.await(t, "web."+ns, dns.TypeA, "NXDOMAIN ")

	// Updated IPs reach the answer.
	cur, err := imports.Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedStringSlice(cur.Object, []string{"10.200.0.2"}, "spec", "ips"); err != nil {
		t.Fatal(err)
	}
	if _, err := imports.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	s.await(t, web, dns.TypeA, "NOERROR A 10.200.0.2")

	// A headless import answers with its clusters' endpoints, and an
	// endpoint with a hostname as hostname.clusterid.svc.ns.svc.clusterset.local.
	if _, err := imports.Create(ctx, serviceImport(ns, "db", "Headless", nil, 5432), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, cl := range []struct{ id, host, ip string }{{"east", "db-0", "10.201.0.1"}, {"west", "db-0", "10.202.0.1"}} {
		sl := endpointSlice(ns, "db-"+cl.id, "", discoveryv1.AddressTypeIPv4, map[string]string{cl.host: cl.ip})
		sl.Labels = map[string]string{mcssource.LabelServiceName: "db", mcssource.LabelSourceCluster: cl.id}
		if _, err := c.Client.DiscoveryV1().EndpointSlices(ns).Create(ctx, sl, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	db := "db." + ns + ".svc.clusterset.local"
	s.await(t, db, dns.TypeA, "NOERROR A 10.201.0.1; A 10.202.0.1")
	s.await(t, "db-0.east."+db, dns.TypeA, "NOERROR A 10.201.0.1")
	s.await(t, "db-0.west."+db, dns.TypeA, "NOERROR A 10.202.0.1")
	s.await(t, "_db._tcp."+db, dns.TypeSRV, "NOERROR SRV 0 50 5432 10-201-0-1."+db+".; SRV 0 50 5432 10-202-0-1."+db+".")
	// A plain Service of the same name does not answer in clusterset.local.
	if _, err := c.Client.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "local-only"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	s.await(t, "local-only."+ns+".svc.cluster.local", dns.TypeA, answer(s.ask(t, "local-only."+ns+".svc.cluster.local", dns.TypeA)))
	s.await(t, "local-only."+ns+".svc.clusterset.local", dns.TypeA, "NXDOMAIN ")

	// A deleted import is NXDOMAIN.
	if err := imports.Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	s.await(t, web, dns.TypeA, "NXDOMAIN ")

	// Without the CRD the zone goes back upstream.
	if err := dyn.Resource(kubetest.CRDs).Delete(ctx, crd, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// Deleting the CRD deletes the imports first (the old answer, then an
	// authoritative NXDOMAIN, meanwhile); once discovery no longer lists it, the name goes upstream.
	before := asked(db)
	for deadline := time.Now().Add(30 * time.Second); asked(db) == before; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s still answered locally after the CRD was deleted, want forwarded", db)
		}
		s.ask(t, db, dns.TypeA) // local answers (old, then NXDOMAIN) until then
	}
}
