package difftest

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"regexp"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/controlplane/kubesource"
	"github.com/meshdns/meshdns/e2e/internal/kubestack"
	"github.com/meshdns/meshdns/internal/testkit/kubetest"
)

// exposedLabel is the namespace label the namespace_labels configuration
// selects; the first two generated namespaces carry it, the third not.
const exposedLabel = "meshdns-difftest"

// optionConfig is one configuration of CoreDNS's kubernetes plugin options
// and the same options given to meshdns.
type optionConfig struct {
	name     string
	corefile string            // lines added to the kubernetes block
	opts     kubestack.Options // meshdns's side
	podNames bool              // endpoint names are pod names (endpoint_pod_names)
	classes  []class           // further differences this configuration allows
}

// optionConfigs are the configurations TestDifferentialOptions runs, one
// or two options each. startup_timeout changes only what happens before
// the first sync (tested in controlplane/kubesource); here it is set on
// both sides to check that it changes nothing after.
var optionConfigs = []optionConfig{
	{
		name:     "namespace_labels",
		corefile: "        namespace_labels " + exposedLabel + "=exposed\n",
		opts:     kubestack.Options{Source: kubesource.Options{NamespaceLabels: exposedLabel + "=exposed"}},
		classes:  namespaceLabelClasses,
	},
	{
		name:     "endpoint_pod_names",
		corefile: "        endpoint_pod_names\n        startup_timeout 30s\n",
		opts:     kubestack.Options{Source: kubesource.Options{EndpointPodNames: true, StartupTimeout: 30 * time.Second}},
		podNames: true,
	},
	{
		name:     "ignore empty_service",
		corefile: "        ignore empty_service\n",
		opts:     kubestack.Options{Source: kubesource.Options{IgnoreEmptyService: true}},
		classes:  ignoreEmptyClasses,
	},
	{
		name:     "noendpoints",
		corefile: "        noendpoints\n",
		opts:     kubestack.Options{Source: kubesource.Options{NoEndpoints: true}},
	},
	{
		name:     "fallthrough",
		corefile: "        fallthrough\n",
		opts:     kubestack.Options{Source: kubesource.Options{Fallthrough: true}},
		classes:  fallthroughClasses,
	},
	{
		name:     "pods disabled",
		corefile: "        pods disabled\n",
		opts:     kubestack.Options{ForwardPods: true},
		classes:  podsDisabledClasses,
	},
}

// TestDifferentialOptions runs the differential test once per option
// configuration on one smaller generated cluster (DIFFTEST_OPTION_SERVICES,
// default 60): CoreDNS with the option in its Corefile, meshdns with the
// same option, asked the same questions.
func TestDifferentialOptions(t *testing.T) {
	size := envInt(t, "DIFFTEST_OPTION_SERVICES", 60)
	seed := envInt(t, "DIFFTEST_SEED", 1)
	coreDNSBinary(t)
	c := cluster.Get(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	rng := rand.New(rand.NewPCG(uint64(seed), 0x6f7074696f6e73))
	w := generateIn(ctx, t, c, rng, size, 3)
	for _, ns := range w.namespaces[:2] {
		labelNamespace(ctx, t, c, ns)
	}
	hiddenNamespaces[w.namespaces[2]] = true
	podWorld := withPodNames(ctx, t, c, w)
	podNS := w.namespaces[0]
	upstream := startUpstream(t)

	for i, oc := range optionConfigs {
		t.Run(oc.name, func(t *testing.T) {
			opts := oc.opts
			opts.TTL = tableTTL
			cd := startCoreDNSWith(t, c, upstream, oc.corefile)
			md := kubestack.StartWith(t, c, podNS, upstream, opts).DNS
			// Both servers have listed everything once they answer a name
			// written after they started (each watch delivers in order).
			ready := fmt.Sprintf("ready%d", i)
			if _, err := c.Client.CoreV1().Services(podNS).Create(ctx, &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Name: ready},
				Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "ready.example.org"},
			}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			awaitAnswer(ctx, t, map[string]string{"coredns": cd, "meshdns": md}, ready+"."+podNS+".svc.cluster.local.")
			world := w
			if oc.podNames {
				world = podWorld
			}
			qs := corpus(rand.New(rand.NewPCG(uint64(seed), uint64(i))), world, podNS)
			compareAll(t, cd, md, qs, podNS, oc.classes)
			t.Logf("%d services, %d questions, seed %d", len(world.services), len(qs), seed)
		})
	}
}

// labelNamespace puts exposedLabel on ns.
func labelNamespace(ctx context.Context, t testing.TB, c *kubetest.Cluster, ns string) {
	t.Helper()
	n, err := c.Client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	n.Labels[exposedLabel] = "exposed"
	if _, err := c.Client.CoreV1().Namespaces().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// withPodNames gives every endpoint without a hostname a targetRef to a
// pod (as the EndpointSlice controller writes it) and returns a copy of w
// whose endpoint names are those pod names, as endpoint_pod_names names
// them. The other configurations ignore the targetRefs.
func withPodNames(ctx context.Context, t testing.TB, c *kubetest.Cluster, w *world) *world {
	t.Helper()
	out := &world{namespaces: w.namespaces, sentinel: w.sentinel}
	for _, s := range w.services {
		cp := *s
		cp.endpoints = slices.Clone(s.endpoints)
		out.services = append(out.services, &cp)
		if len(s.endpoints) == 0 {
			continue
		}
		api := c.Client.DiscoveryV1().EndpointSlices(s.ns)
		sl, err := api.Get(ctx, s.name+"-1", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get slice of %s/%s: %v", s.ns, s.name, err)
		}
		for j := range sl.Endpoints {
			if sl.Endpoints[j].Hostname != nil {
				continue
			}
			pod := fmt.Sprintf("%s-pod-%d", s.name, j)
			sl.Endpoints[j].TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: s.ns, Name: pod}
			cp.endpoints[j].hostname = pod
		}
		if _, err := api.Update(ctx, sl, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("update slice of %s/%s: %v", s.ns, s.name, err)
		}
	}
	return out
}

// awaitAnswer polls each server until it answers name with records. No
// deadline but ctx's: a loaded machine may take long to sync.
func awaitAnswer(ctx context.Context, t testing.TB, servers map[string]string, name string) {
	t.Helper()
	for _, srv := range slices.Sorted(maps.Keys(servers)) {
		for {
			m, err := exchange(servers[srv], name, dns.TypeA, tcp)
			if err == nil && m.Rcode == dns.RcodeSuccess && len(m.Answer) > 0 {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("%s never answered %s: %v", srv, name, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// compareAll asks both servers every question and fails on a difference
// none of classes and extra match.
func compareAll(t *testing.T, cd, md string, qs []question, podNS string, extra []class) {
	t.Helper()
	diffs := make([]*difference, len(qs))
	errs := make([]error, len(qs))
	var wg sync.WaitGroup
	work := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range work {
				a, err := resolve(cd, qs[i], podNS)
				if err == nil {
					var b reply
					if b, err = resolve(md, qs[i], podNS); err == nil {
						if what := diff(a, b); len(what) > 0 {
							diffs[i] = &difference{q: qs[i], cd: a, md: b, what: what}
						}
					}
				}
				errs[i] = err
			}
		})
	}
	for i := range qs {
		work <- i
	}
	close(work)
	wg.Wait()

	all := append(slices.Clone(classes), extra...)
	counts := map[string]int{}
	var unexplained []string
	for i, d := range diffs {
		switch {
		case errs[i] != nil:
			t.Errorf("%v: %v", qs[i], errs[i])
		case d == nil:
			counts["same"]++
		default:
			name := ""
			for _, c := range all {
				if c.match(*d) {
					name = c.name
					break
				}
			}
			if name == "" {
				unexplained = append(unexplained, d.String())
			} else {
				counts[name]++
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(counts)) {
		t.Logf("%-32s %d", name, counts[name])
	}
	for i, u := range unexplained {
		if i == 40 {
			t.Errorf("... and %d more", len(unexplained)-i)
			break
		}
		t.Errorf("undocumented difference: %s", u)
	}
}

// hiddenNamespaces are the generated namespaces namespace_labels does not
// expose; set by TestDifferentialOptions before any comparison.
var hiddenNamespaces = map[string]bool{}

// Differences a configuration allows on top of classes: the table "With
// the kubernetes plugin's options" of docs/coredns-differences.md, kept
// equal by TestOptionClassesDocumented.
var (
	namespaceLabelClasses = []class{
		{name: "namespace-labels-reverse", match: func(d difference) bool {
			return d.q.form == formPTR && d.q.svc != nil && hiddenNamespaces[d.q.svc.ns] &&
				d.cd.rcode == dns.RcodeSuccess && len(d.cd.answer) > 0 && d.md.rcode == dns.RcodeNameError
		}},
		{name: "namespace-labels-pod-names", match: func(d difference) bool {
			return d.q.form == formPod && d.q.svc != nil && hiddenNamespaces[d.q.svc.ns] &&
				d.cd.rcode == dns.RcodeNameError && d.md.rcode == dns.RcodeSuccess
		}},
	}
	ignoreEmptyClasses = []class{
		{name: "ignore-empty-service-reverse", match: func(d difference) bool {
			return d.q.form == formPTR && d.q.ep == nil && d.q.svc != nil && d.q.svc.kind <= clusterIPDual &&
				d.cd.rcode == dns.RcodeSuccess && len(d.cd.answer) > 0 && d.md.rcode == dns.RcodeNameError
		}},
	}
	fallthroughClasses = []class{
		{name: "fallthrough-forwarded", match: func(d difference) bool {
			// Pod names, and the empty non-terminals (a namespace's
			// name, svc.<domain>) CoreDNS answers NODATA for.
			synthesized := d.q.form == formPod ||
				(d.q.form == formNamespace || d.q.form == formUnknown) && len(d.cd.answer) == 0
			return synthesized && d.cd.rcode == dns.RcodeSuccess && d.md.rcode == dns.RcodeNameError && !d.md.aa
		}},
	}
	podsDisabledClasses = []class{
		{name: "pods-disabled-forwarded-aa", match: func(d difference) bool {
			return d.q.form == formPod && only(d.what, "aa") && d.cd.aa && !d.md.aa && d.md.rcode == dns.RcodeNameError
		}},
	}
)

// TestOptionClassesDocumented keeps the classes above and the options
// table of docs/coredns-differences.md the same list.
func TestOptionClassesDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/coredns-differences.md")
	if err != nil {
		t.Fatal(err)
	}
	var documented, allowed []string
	for _, m := range regexp.MustCompile("(?m)^\\| [a-z_ ]+ \\| `([a-z0-9-]+)` \\|").FindAllStringSubmatch(string(doc), -1) {
		documented = append(documented, m[1])
	}
	for _, oc := range optionConfigs {
		for _, c := range oc.classes {
			allowed = append(allowed, c.name)
		}
	}
	slices.Sort(documented)
	slices.Sort(allowed)
	if len(allowed) == 0 || !slices.Equal(allowed, documented) {
		t.Errorf("option difference classes %q, documented %q", allowed, documented)
	}
}
