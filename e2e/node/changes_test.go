package node

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// result is one lookup the application logged.
type result struct {
	at   time.Time
	name string
	out  string // "ok <answers>" or "err <error>"
}

// results parses the application's log.
func (e *env) results(ns, pod string) []result {
	var out []result
	for _, line := range strings.Split(e.n.ContainerLog(ns, pod, "app"), "\n") {
		f := strings.SplitN(line, " ", 4)
		if len(f) != 4 || f[0] != "RESULT" {
			continue
		}
		nanos, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			continue
		}
		out = append(out, result{at: time.Unix(0, nanos), name: f[2], out: f[3]})
	}
	return out
}

// firstAfter waits for the first lookup of name after t0 whose result
// satisfies ok, and returns when it happened.
func (e *env) firstAfter(t *testing.T, ns, pod, name string, t0 time.Time, ok func(string) bool) time.Time {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for _, r := range e.results(ns, pod) {
			if r.name == name && r.at.After(t0) && ok(r.out) {
				return r.at
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s/%s: no lookup of %s after %v gave the expected answer", ns, pod, name, t0.Format(time.StampMilli))
	return time.Time{}
}

// testServiceChanges creates, changes and deletes a Service in the API
// server while an application in a running pod resolves its name every
// 20 ms, and measures the time from each API write to the answer changing.
func testServiceChanges(t *testing.T, e *env) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const ns, pod, name = "demo", "watcher", "chg"
	p := appPod(pod, []string{name})
	p.Spec.Containers[0].Args = []string{"-every", "20ms", name}
	if _, err := e.c.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Before the Service exists the name is NXDOMAIN (authoritatively, in
	// the pod: the cluster DNS would say the same).
	e.firstAfter(t, ns, pod, name, time.Time{}, func(out string) bool { return strings.HasPrefix(out, "err") })

	var lat []time.Duration
	t0 := time.Now()
	createHeadless(t, ctx, e, ns, name, "h", "10.244.0.100")
	lat = append(lat, e.firstAfter(t, ns, pod, name, t0, func(out string) bool { return out == "ok 10.244.0.100" }).Sub(t0))
	eps := e.c.Client.DiscoveryV1().EndpointSlices(ns)
	for i := 1; i <= 20; i++ {
		es, err := eps.Get(ctx, name+"-1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ip := fmt.Sprintf("10.244.0.%d", 100+i)
		es.Endpoints[0].Addresses = []string{ip}
		t0 = time.Now()
		if _, err := eps.Update(ctx, es, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		lat = append(lat, e.firstAfter(t, ns, pod, name, t0, func(out string) bool { return out == "ok "+ip }).Sub(t0))
	}
	t0 = time.Now()
	if err := e.c.Client.CoreV1().Services(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	lat = append(lat, e.firstAfter(t, ns, pod, name, t0, func(out string) bool { return strings.HasPrefix(out, "err") }).Sub(t0))
	p50, p99 := percentile(lat, 50), percentile(lat, 99)
	t.Logf("API write to changed answer in the pod, %d changes (create, 20 endpoint changes, delete): p50 %v, p99 %v, max %v",
		len(lat), p50.Round(time.Millisecond), p99.Round(time.Millisecond), percentile(lat, 100).Round(time.Millisecond))
	_ = e.c.Client.CoreV1().Pods(ns).Delete(ctx, pod, metav1.DeleteOptions{})
}

func percentile(d []time.Duration, p int) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[max(0, min(len(s)-1, i-1))]
}
