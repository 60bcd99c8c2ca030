package forwardsource

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/meshdns/meshdns/controlplane/agentsettings"
	"github.com/meshdns/meshdns/controlplane/auth"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

const rulesYAML = `
rules:
- name: corp
  namespaces: [team-a]
  domains: [Corp.Example.]
  upstreams: [10.0.0.53]
- name: eu
  namespaces: [team-a]
  podSelector:
    matchLabels: {app: web}
  domains: [eu.corp.example, corp.example]
  upstreams: ["tls://10.0.0.54@dns.corp.example", "[fd00::54]:5353"]
- name: internal
  domains: [internal.example]
  upstreams: [10.0.1.53]
`

func TestParseFileRejects(t *testing.T) {
	for _, tc := range []struct {
		name, file, wantErr string
	}{
		{name: "unknown field", file: "rules:\n- name: a\n  podSelectr: {}\n  domains: [a.example]\n  upstreams: [10.0.0.1]\n", wantErr: "podSelectr"},
		{name: "no name", file: "rules:\n- domains: [a.example]\n  upstreams: [10.0.0.1]\n", wantErr: "needs a name"},
		{name: "name twice", file: "rules:\n- {name: a, domains: [a.example], upstreams: [10.0.0.1]}\n- {name: a, domains: [b.example], upstreams: [10.0.0.1]}\n", wantErr: "name given twice"},
		{name: "no upstreams", file: "rules:\n- {name: a, domains: [a.example]}\n", wantErr: "needs domains and upstreams"},
		{name: "bad domain", file: "rules:\n- {name: a, domains: [a..example], upstreams: [10.0.0.1]}\n", wantErr: "a..example"},
		{name: "host name upstream", file: "rules:\n- {name: a, domains: [a.example], upstreams: [dns.corp:53]}\n", wantErr: "dns.corp:53"},
		{name: "bad namespace", file: "rules:\n- {name: a, namespaces: [Team_A], domains: [a.example], upstreams: [10.0.0.1]}\n", wantErr: "Team_A"},
		{name: "bad selector", file: "rules:\n- name: a\n  podSelector: {matchExpressions: [{key: app, operator: Sometimes}]}\n  domains: [a.example]\n  upstreams: [10.0.0.1]\n", wantErr: "podSelector"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseFile([]byte(tc.file))
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseFile: %v, want ErrInvalid naming %q", err, tc.wantErr)
			}
		})
	}
}

// podLabels is a fixed label cache.
func podLabels(m map[string]labels.Set) PodLabels {
	return func(ns, pod string) (labels.Set, bool) {
		l, ok := m[ns+"/"+pod]
		return l, ok
	}
}

// TestFill: each agent gets the rules that select its pod, by namespace
// and label; a domain two selected rules name goes by the first; labels
// are never taken from an agent's own claim.
func TestFill(t *testing.T) {
	rules, err := ParseFile([]byte(rulesYAML))
	if err != nil {
		t.Fatal(err)
	}
	p := NewPart(podLabels(map[string]labels.Set{
		"team-a/web-0":   {"app": "web"},
		"team-a/batch-0": {"app": "batch"},
	}))
	p.Set(rules)
	corp := &meshdnsv1.ForwardRule{Domains: []string{"corp.example"}, Upstreams: []string{"10.0.0.53:53"}, Source: "file/corp"}
	eu := &meshdnsv1.ForwardRule{Domains: []string{"eu.corp.example"}, Upstreams: []string{"tls://10.0.0.54:853@dns.corp.example", "[fd00::54]:5353"}, Source: "file/eu"}
	internal := &meshdnsv1.ForwardRule{Domains: []string{"internal.example"}, Upstreams: []string{"10.0.1.53:53"}, Source: "file/internal"}
	for _, tc := range []struct {
		name string
		id   auth.Identity
		want []*meshdnsv1.ForwardRule
	}{
		{name: "selected pod", id: auth.Identity{Method: auth.MethodToken, Namespace: "team-a", Pod: "web-0"}, want: []*meshdnsv1.ForwardRule{corp, eu, internal}},
		{name: "other pod", id: auth.Identity{Method: auth.MethodToken, Namespace: "team-a", Pod: "batch-0"}, want: []*meshdnsv1.ForwardRule{corp, internal}},
		{name: "labels not known", id: auth.Identity{Method: auth.MethodToken, Namespace: "team-a", Pod: "web-1"}, want: []*meshdnsv1.ForwardRule{corp, internal}},
		{name: "spiffe claims the pod", id: auth.Identity{Method: auth.MethodSPIFFE, Namespace: "team-a", Pod: "web-0"}, want: []*meshdnsv1.ForwardRule{corp, internal}},
		{name: "other namespace", id: auth.Identity{Method: auth.MethodToken, Namespace: "team-b", Pod: "web-0"}, want: []*meshdnsv1.ForwardRule{internal}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &meshdnsv1.AgentSettings{Forwarding: []*meshdnsv1.ForwardRule{{Domains: []string{"stale.example"}}}}
			p.Fill(tc.id, s)
			if diff := cmp.Diff(tc.want, s.Forwarding, protocmp.Transform()); diff != "" {
				t.Errorf("forwarding (-want +got):\n%s", diff)
			}
		})
	}
	// Composed, the settings require the feature, so an agent without it
	// NACKs instead of resolving corp names through the wrong servers.
	a := agentsettings.Compose(p).For(auth.Identity{Method: auth.MethodToken, Namespace: "team-b"}, nil)
	if diff := cmp.Diff([]string{"forwarding"}, a.Msg.GetRequires()); diff != "" {
		t.Errorf("requires (-want +got):\n%s", diff)
	}
}

// TestFile: the file's rules reach the part; a bad version is logged and
// the last good rules stay; the next good one replaces them.
func TestFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "forwarding.yaml")
	if err := os.WriteFile(path, []byte(rulesYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	var logs testenv.Buffer
	f, err := NewFile(FileConfig{Path: path, Interval: 20 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	p := f.Part
	changed := p.Changed()
	select {
	case <-f.Ready():
		t.Fatal("ready before the file was read")
	default:
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = f.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	<-changed
	<-f.Ready()
	domains := func() []string {
		s := &meshdnsv1.AgentSettings{}
		p.Fill(auth.Identity{Method: auth.MethodToken, Namespace: "team-a", Pod: "web-0"}, s)
		var out []string
		for _, r := range s.Forwarding {
			out = append(out, r.Domains...)
		}
		return out
	}
	if diff := cmp.Diff([]string{"corp.example", "internal.example"}, domains()); diff != "" {
		t.Errorf("first version (-want +got):\n%s", diff)
	}

	testenv.ReplaceFile(t, path, "rules:\n- {name: a, domains: [a.example], upstreams: [dns.corp:53]}\n")
	for !strings.Contains(logs.String(), "forwarding rules rejected") { // the test's timeout bounds this
		time.Sleep(10 * time.Millisecond)
	}
	if diff := cmp.Diff([]string{"corp.example", "internal.example"}, domains()); diff != "" {
		t.Errorf("after a bad version (-want +got):\n%s", diff)
	}

	changed = p.Changed()
	testenv.ReplaceFile(t, path, "rules:\n- {name: a, domains: [a.example], upstreams: [10.0.0.9]}\n")
	<-changed
	if diff := cmp.Diff([]string{"a.example"}, domains()); diff != "" {
		t.Errorf("after a good version (-want +got):\n%s", diff)
	}
}
