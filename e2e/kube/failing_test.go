package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/miekg/dns"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/meshdns/meshdns/controlplane/admin"
	"github.com/meshdns/meshdns/controlplane/agentsettings"
	"github.com/meshdns/meshdns/controlplane/failingreport"
	"github.com/meshdns/meshdns/e2e/internal/kubestack"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

// TestFailingReportByNamespaceLabel: against a real API server, labelling
// a namespace turns its agents' failing-names report on: the names the
// pod got NXDOMAIN for reach the control plane's /debug/failing. Taking
// the label away turns it off again.
func TestFailingReportByNamespaceLabel(t *testing.T) {
	c := cluster.Get(t)
	podNS := c.Namespace(t, "failing")
	upstream, _ := startUpstream(t)
	part, err := failingreport.New(failingreport.Config{Mode: failingreport.Namespaces, Kube: c.Config, Window: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	st := kubestack.StartWith(t, c, podNS, upstream, kubestack.Options{SettingsParts: []agentsettings.Part{part}})
	s := &stack{dns: st.DNS}
	name := "nope." + podNS + ".svc.cluster.local."
	failing := func() []admin.PodFailing {
		t.Helper()
		res, err := http.Get(st.Admin + "/debug/failing?rcode=NXDOMAIN&name=" + name)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var pods []admin.PodFailing
		if err := json.NewDecoder(res.Body).Decode(&pods); err != nil {
			t.Fatal(err)
		}
		return pods
	}
	label := func(value string) {
		t.Helper()
		v := "null"
		if value != "" {
			v = fmt.Sprintf("%q", value)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%s}}}`, failingreport.Label, v)
		if _, err := c.Client.CoreV1().Namespaces().Patch(ctx, podNS, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	nxdomain := func() {
		t.Helper()
		if r := s.ask(t, name, dns.TypeA); r.Rcode != dns.RcodeNameError {
			t.Fatalf("%s: rcode %s, want NXDOMAIN", name, dns.RcodeToString[r.Rcode])
		}
	}

	testenv.Eventually(t, "the first table (NXDOMAIN, not SERVFAIL)", 3*time.Minute, func() bool {
		return s.ask(t, name, dns.TypeA).Rcode == dns.RcodeNameError
	})
	label(failingreport.Enabled)
	var pods []admin.PodFailing
	testenv.Eventually(t, "the pod's failing name in /debug/failing", 3*time.Minute, func() bool {
		nxdomain() // once the agent has the settings, each is counted
		pods = failing()
		return len(pods) == 1
	})
	if p := pods[0]; p.Namespace != podNS || p.Pod != "client-0" || len(p.Names) != 1 || p.Names[0].Rcode != "NXDOMAIN" || p.Names[0].Count < 1 {
		t.Errorf("/debug/failing?name=%s: %+v", name, p)
	}

	label("")
	testenv.Eventually(t, "no report once the label is gone", 3*time.Minute, func() bool {
		nxdomain()
		return len(failing()) == 0
	})
}
