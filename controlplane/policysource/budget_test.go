package policysource

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshdns/meshdns/pkg/policy"
)

// sized returns a valid policy of namespace ns with n rules, created at
// the given minute.
func sized(t *testing.T, ns, name string, n, minute int) Policy {
	t.Helper()
	return mustParse(t, sizedYAML(ns, name, n, minute))
}

// sizedYAML is sized's policy as YAML.
func sizedYAML(ns, name string, n, minute int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: meshdns.io/v1alpha1\nkind: DNSPolicy\nmetadata: {name: %s, namespace: %s, creationTimestamp: %q}\nspec:\n  rules:\n",
		name, ns, time.Date(2026, 1, 1, 0, minute, 0, 0, time.UTC).Format(time.RFC3339))
	for i := range n {
		fmt.Fprintf(&b, "  - {pattern: %s-%d.example, action: Deny}\n", name, i)
	}
	return b.String()
}

// The policies of one namespace together stay within what one policy may
// hold, since a pod may be sent their merge: the oldest are admitted, the
// one that would go over is refused with an error naming the limit, and
// what a pod is sent never exceeds it. Freeing room admits it again.
func TestStoreRuleBudget(t *testing.T) {
	old := sized(t, "shop", "old", 6000, 1)  // admitted first
	newer := sized(t, "shop", "b", 5000, 3)  // 11,000 with old: refused
	small := sized(t, "shop", "z", 4000, 2)  // created before b: 10,000 with old
	other := sized(t, "web", "big", 9000, 9) // another namespace's budget
	fileOld := sized(t, "shop", "a", 1, 0)   // a file's, older than all
	s := NewStore()
	s.SetPolicies(Origin, []Policy{newer, old, small, other})
	s.SetPolicies(FileOrigin, []Policy{fileOld})

	// fileOld (1) and old (6,000) fit, small (4,000) would make 10,001.
	refused := s.Refused(Origin)
	if got := keys(refused); !cmp.Equal(got, []string{"shop/b", "shop/z"}) {
		t.Fatalf("refused %v, want shop/b and shop/z", got)
	}
	want := "DNSPolicy shop/z: its 4000 rules and the 6001 of the older policies of namespace shop (shop/a, shop/old) come to 10001, " +
		"more than the limit of 10000 rules for the policies of a namespace together (a pod is sent their merge); not served"
	if got := refused["shop/z"].Error(); got != want {
		t.Errorf("error\n %s\nwant\n %s", got, want)
	}
	if len(s.Refused(FileOrigin)) != 0 {
		t.Errorf("file policies refused: %v", s.Refused(FileOrigin))
	}
	p := fillSettings(s, "shop", "any")
	if p.GetSource() != "shop/a,shop/old" || len(p.GetRules()) != 6001 {
		t.Errorf("pod sent %q with %d rules, want shop/a,shop/old with 6001", p.GetSource(), len(p.GetRules()))
	}
	if p := fillSettings(s, "web", "any"); len(p.GetRules()) != 9000 {
		t.Errorf("other namespace: %d rules", len(p.GetRules()))
	}

	// The file's policy goes: small, older than b, fits (10,000); b
	// still does not.
	s.SetPolicies(FileOrigin, nil)
	if got := keys(s.Refused(Origin)); !cmp.Equal(got, []string{"shop/b"}) {
		t.Errorf("refused %v, want shop/b", got)
	}
	if p := fillSettings(s, "shop", "any"); p.GetSource() != "shop/old,shop/z" || len(p.GetRules()) != policy.MaxRules {
		t.Errorf("pod sent %q with %d rules", p.GetSource(), len(p.GetRules()))
	}
	// A file's policy that gives no creation time counts as newest: it
	// never pushes out one the API server holds.
	s.SetPolicies(FileOrigin, []Policy{mustParse(t, strings.Replace(sizedYAML("shop", "a0", 1, 0), ", creationTimestamp: \"2026-01-01T00:00:00Z\"", "", 1))})
	if got := keys(s.Refused(FileOrigin)); !cmp.Equal(got, []string{"shop/a0"}) {
		t.Errorf("file policies refused %v, want the one without a creation time", got)
	}
	s.SetPolicies(FileOrigin, nil)
	// Every replica orders them the same, whatever the input order.
	r := NewStore()
	r.SetPolicies(Origin, []Policy{other, small, old, newer})
	if diff := cmp.Diff(fillSettings(s, "shop", "x").String(), fillSettings(r, "shop", "x").String()); diff != "" {
		t.Errorf("another order merges otherwise (-first +second):\n%s", diff)
	}
}

func keys(m map[string]error) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestKubeRuleBudget: on a real API server, a policy whose rules would
// bring its namespace's policies over the limit gets Accepted=False with
// a message naming the limit and is not served, the older one is; when
// room is freed it is admitted and its condition turns True.
func TestKubeRuleBudget(t *testing.T) {
	c, dyn := withCRD(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns := c.Namespace(t, "budget")
	store := NewStore()
	src, err := NewKube(KubeConfig{Config: c.Config, Store: store, NoPodLabels: true})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- src.Run(rctx, newSink()) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	doc := func(name string, n int) string {
		var b strings.Builder
		fmt.Fprintf(&b, "apiVersion: meshdns.io/v1alpha1\nkind: DNSPolicy\nmetadata: {name: %s}\nspec:\n  rules:\n", name)
		for i := range n {
			fmt.Fprintf(&b, "  - {pattern: %s-%d.example, action: Deny}\n", name, i)
		}
		return b.String()
	}
	rules := func(want int) func() string {
		return func() string {
			if n := len(fillSettings(store, ns, "p").GetRules()); n != want {
				return fmt.Sprintf("%d rules, want %d", n, want)
			}
			return ""
		}
	}
	// Created in this order (in the same second, the names order them
	// the same way).
	apply(t, dyn, ns, doc("a", 6000))
	eventually(t, ctx, store, "a served", rules(6000))
	b := apply(t, dyn, ns, doc("b", 5000))
	got := waitStatus(t, ctx, dyn, ns, "b", b.GetGeneration(), "False")
	want := fmt.Sprintf("DNSPolicy %s/b: its 5000 rules and the 6000 of the older policies of namespace %s (%s/a) come to 11000, "+
		"more than the limit of 10000 rules", ns, ns, ns)
	if msg, _ := got["message"].(string); !strings.Contains(msg, want) {
		t.Errorf("condition of b: %v, want a message with %q", got, want)
	}
	if p := fillSettings(store, ns, "p"); p.GetSource() != ns+"/a" {
		t.Errorf("pod sent %q, want %s/a alone", p.GetSource(), ns)
	}
	if err := dyn.Resource(Resource).Namespace(ns).Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, ctx, store, "b admitted", rules(5000))
	waitStatus(t, ctx, dyn, ns, "b", b.GetGeneration(), "True")

	// A policy of another origin, older, takes the room: b's condition
	// follows, though b itself did not change.
	file := mustParse(t, strings.Replace(doc("f", 6000), "metadata: {name: f}",
		"metadata: {name: f, namespace: "+ns+", creationTimestamp: \"2020-01-01T00:00:00Z\"}", 1))
	store.SetPolicies(FileOrigin, []Policy{file})
	got = waitStatus(t, ctx, dyn, ns, "b", b.GetGeneration(), "False")
	if msg, _ := got["message"].(string); !strings.Contains(msg, "("+ns+"/f)") {
		t.Errorf("condition of b: %v, want the file's policy named", got)
	}
	store.SetPolicies(FileOrigin, nil)
	waitStatus(t, ctx, dyn, ns, "b", b.GetGeneration(), "True")
}
