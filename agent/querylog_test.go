package agent

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/internal/testkit/testenv"
	"github.com/meshdns/meshdns/pkg/proxy"
)

// The query log is off until /debug/querylog turns it on, then writes a
// JSON line naming the pod for each NXDOMAIN over real sockets, and goes
// off again: no restart.
func TestQueryLogAtRuntime(t *testing.T) {
	up := startUpstream(t)
	path := writeFile(t, t.TempDir(), "nametable.json", readExample(t))
	out := &testenv.Buffer{}
	a := startAgent(t, Config{NameTableFile: path, Upstreams: []string{up.addr}, PodName: "web-0", QueryLogOutput: out})
	eventually(t, "ready", a.Ready)
	const missing = "nope.demo.svc.cluster.local"

	exchange(t, "udp", a.dns, missing, dns.TypeA)
	if got := out.String(); got != "" {
		t.Fatalf("query log written while off: %q", got)
	}

	body, err := httpPut(a.admin + "/debug/querylog?classes=nxdomain&sample=1&rate=10")
	if err != nil {
		t.Fatal(err)
	}
	var cfg proxy.QueryLogConfig
	if err := json.Unmarshal([]byte(body), &cfg); err != nil {
		t.Fatalf("reply %q: %v", body, err)
	}
	if want := (proxy.QueryLogConfig{Classes: proxy.LogNXDomain, Sample: 1, Rate: 10}); cfg != want {
		t.Errorf("config %+v, want %+v", cfg, want)
	}
	exchange(t, "udp", a.dns, "web.demo.svc.cluster.local", dns.TypeA) // NOERROR: not logged
	exchange(t, "udp", a.dns, missing, dns.TypeA)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("lines %q, want one", lines)
	}
	var l map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &l); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{"namespace": "demo", "pod": "web-0", "qname": missing + ".", "rcode": "NXDOMAIN", "source": "table"} {
		if l[k] != want {
			t.Errorf("%s = %v, want %q (line %s)", k, l[k], want, lines[0])
		}
	}

	if code, _ := httpGet(t, a.admin+"/debug/querylog"); code != 200 {
		t.Errorf("GET: %d", code)
	}
	if body, _ := httpPut(a.admin + "/debug/querylog?classes=bogus"); !strings.Contains(body, "unknown query log class") {
		t.Errorf("bad classes: %q", body)
	}
	if _, err := httpPut(a.admin + "/debug/querylog?classes=off"); err != nil {
		t.Fatal(err)
	}
	exchange(t, "udp", a.dns, missing, dns.TypeA)
	if n := strings.Count(out.String(), "\n"); n != 1 {
		t.Errorf("%d lines after turning it off, want still 1", n)
	}
}

// A line for an answer an upstream gave names that upstream (a real
// resolver and a real DNS server on loopback); the same question answered
// from the cache names none.
func TestQueryLogNamesUpstream(t *testing.T) {
	up := startUpstream(t)
	out := &testenv.Buffer{}
	a := startAgent(t, Config{Upstreams: []string{up.addr}, PodName: "web-0", QueryLogOutput: out,
		QueryLog: proxy.QueryLogConfig{Classes: proxy.LogAll}})
	eventually(t, "ready", a.Ready)
	exchange(t, "udp", a.dns, "example.com", dns.TypeA)
	exchange(t, "udp", a.dns, "example.com", dns.TypeA)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("lines %q, want two", lines)
	}
	for i, want := range []map[string]any{
		{"source": "upstream", "upstream": up.addr, "rcode": "NOERROR"},
		{"source": "cache", "upstream": nil, "rcode": "NOERROR"},
	} {
		var l map[string]any
		if err := json.Unmarshal([]byte(lines[i]), &l); err != nil {
			t.Fatal(err)
		}
		for k, v := range want {
			if l[k] != v {
				t.Errorf("line %d: %s = %v, want %v (%s)", i, k, l[k], v, lines[i])
			}
		}
	}
}
