package agent

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/agent/discovery/discoverytest"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
	"github.com/meshdns/meshdns/pkg/proxy"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

func ptrTo[T any](v T) *T { return &v }

// Each of the operator's sources overrides the fields it sets of the ones
// before it: flags, settings, annotations; the admin endpoint raises what
// they compose, its classes joining theirs.
func TestQueryLogSourcesPrecedence(t *testing.T) {
	nx, sf, all := proxy.LogNXDomain, proxy.LogServFail, proxy.LogAll
	flags := proxy.QueryLogConfig{Classes: nx, Rate: 100}
	for _, tc := range []struct {
		name                        string
		settings, annotation, admin queryLogPatch
		want                        proxy.QueryLogConfig
	}{
		{name: "flags alone", want: flags},
		{name: "settings over flags", settings: queryLogPatch{Classes: &sf, Sample: ptrTo(10)}, want: proxy.QueryLogConfig{Classes: sf, Sample: 10, Rate: 100}},
		{name: "annotation over settings, field by field", settings: queryLogPatch{Classes: &sf, Sample: ptrTo(10)},
			annotation: queryLogPatch{Sample: ptrTo(2), Rate: ptrTo(5)}, want: proxy.QueryLogConfig{Classes: sf, Sample: 2, Rate: 5}},
		{name: "annotation turns off", settings: queryLogPatch{Classes: &all}, annotation: queryLogPatch{Classes: ptrTo(proxy.QueryLogClass(0))},
			want: proxy.QueryLogConfig{Rate: 100}},
		{name: "admin adds to all", settings: queryLogPatch{Classes: &sf}, annotation: queryLogPatch{Classes: &nx}, admin: queryLogPatch{Classes: &all},
			want: proxy.QueryLogConfig{Classes: nx | all, Rate: 100}},
		{name: "admin never thins out", annotation: queryLogPatch{Sample: ptrTo(2)}, admin: queryLogPatch{Classes: ptrTo(proxy.QueryLogClass(0)), Sample: ptrTo(10), Rate: ptrTo(5)},
			want: proxy.QueryLogConfig{Classes: nx, Sample: 2, Rate: 100}},
		{name: "admin sets an off floor as it asks", settings: queryLogPatch{Classes: ptrTo(proxy.QueryLogClass(0))}, admin: queryLogPatch{Classes: &sf, Sample: ptrTo(10), Rate: ptrTo(5)},
			want: proxy.QueryLogConfig{Classes: sf, Sample: 10, Rate: 5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := queryLogSources{flags: flags, settings: tc.settings, annotation: tc.annotation, admin: tc.admin}
			if diff := cmp.Diff(tc.want, s.effective()); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
}

func TestQueryLogFromAnnotations(t *testing.T) {
	for _, tc := range []struct {
		name    string
		file    string
		want    queryLogPatch
		wantErr string
	}{
		{name: "none", file: "kubernetes.io/psp=\"x\"\n", want: queryLogPatch{}},
		{name: "classes, sample and rate", file: `meshdns.io/query-log="nxdomain, servfail"` + "\n" + `meshdns.io/query-log-rate="20"` + "\n" + `meshdns.io/query-log-sample="4"`,
			want: queryLogPatch{Classes: ptrTo(proxy.LogNXDomain | proxy.LogServFail), Sample: ptrTo(4), Rate: ptrTo(20)}},
		{name: "off", file: `meshdns.io/query-log="off"`, want: queryLogPatch{Classes: ptrTo(proxy.QueryLogClass(0))}},
		{name: "escaped value", file: `meshdns.io/query-log="nxdomain\u002cservfail"` + "\nother=\"a\\nb\"", want: queryLogPatch{Classes: ptrTo(proxy.LogNXDomain | proxy.LogServFail)}},
		{name: "bad class", file: `meshdns.io/query-log="nxdomain,loud"`, wantErr: "meshdns.io/query-log: unknown query log class"},
		{name: "bad rate", file: `meshdns.io/query-log-rate="-1"`, wantErr: "meshdns.io/query-log-rate"},
		{name: "not the downward API format", file: "meshdns.io/query-log=all", wantErr: "not quoted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ann, err := parseDownwardAnnotations([]byte(tc.file))
			var p queryLogPatch
			if err == nil {
				p, err = queryLogFromAnnotations(ann)
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, p); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
}

// writeAnnotations replaces the annotations file as the kubelet does: a
// new folder and a symlink swap.
func writeAnnotations(t testing.TB, dir string, ann map[string]string) {
	t.Helper()
	var b strings.Builder
	for k, v := range ann {
		fmt.Fprintf(&b, "%s=%s\n", k, strconv.Quote(v))
	}
	testenv.UpdateConfigMapVolume(t, dir, map[string]string{"annotations": b.String()})
}

// The pod's annotations switch the query log of a running agent, over
// what its flags say; a bad value keeps the last good setting, counted;
// removing the annotation goes back to the flags.
func TestQueryLogFromPodAnnotations(t *testing.T) {
	up := startUpstream(t)
	table := writeFile(t, t.TempDir(), "nametable.json", readExample(t))
	dir := t.TempDir()
	writeAnnotations(t, dir, map[string]string{"other": "x", AnnotationQueryLog: "nxdomain"})
	out := &testenv.Buffer{}
	a := startAgent(t, Config{NameTableFile: table, Upstreams: []string{up.addr}, PodName: "web-0", QueryLogOutput: out,
		PodAnnotations: filepath.Join(dir, "annotations"), QueryLog: proxy.QueryLogConfig{Rate: 50}})
	eventually(t, "ready", a.Ready)
	want := func(c proxy.QueryLogConfig) {
		t.Helper()
		eventually(t, fmt.Sprintf("query log %+v", c), func() bool { return a.run.server.QueryLog() == c })
	}
	// Set at start, before the first answer.
	want(proxy.QueryLogConfig{Classes: proxy.LogNXDomain, Rate: 50})
	exchange(t, "udp", a.dns, "nope.demo.svc.cluster.local", dns.TypeA)
	if !strings.Contains(out.String(), `"rcode":"NXDOMAIN"`) {
		t.Errorf("no NXDOMAIN line: %q", out.String())
	}

	writeAnnotations(t, dir, map[string]string{AnnotationQueryLog: "all", AnnotationQueryLogSample: "3"})
	want(proxy.QueryLogConfig{Classes: proxy.LogAll, Sample: 3, Rate: 50})

	writeAnnotations(t, dir, map[string]string{AnnotationQueryLog: "all,loud", AnnotationQueryLogSample: "3"})
	eventually(t, "the bad annotation counted", func() bool { return a.m.annotationRejects.Value() >= 1 })
	if got := a.run.server.QueryLog(); got != (proxy.QueryLogConfig{Classes: proxy.LogAll, Sample: 3, Rate: 50}) {
		t.Errorf("after a bad annotation: %+v, want the last good", got)
	}

	// Back to the flags: off (the server reports an off log as zero).
	writeAnnotations(t, dir, map[string]string{"other": "y"})
	want(proxy.QueryLogConfig{})
}

// The control plane's settings set the query log with the version that
// carries them (feature "query-log"); the pod's annotation overrides them;
// a version with a query log class the agent does not know is NACKed and
// the last good setting stays.
func TestQueryLogFromSettings(t *testing.T) {
	up := startNamesUpstream(t)
	cp := discoverytest.Start(t, "127.0.0.1:0", nil)
	dir := t.TempDir()
	writeAnnotations(t, dir, map[string]string{"other": "x"})
	a := startAgent(t, Config{ControlPlanes: []string{cp.Addr}, StateDir: t.TempDir(), Upstreams: []string{up.addr}, PodName: "web-0",
		PodAnnotations: filepath.Join(dir, "annotations"), QueryLogOutput: &testenv.Buffer{}})
	id := cp.Recv(t).GetIdentity()
	if f := id.GetFeatures(); !strings.Contains(strings.Join(f, ","), "query-log") {
		t.Errorf("identity features %q lack query-log", f)
	}
	send := func(version string, ql *meshdnsv1.QueryLog) *meshdnsv1.StreamNameTableRequest {
		t.Helper()
		tab := cpTable(map[string]string{"a.demo.svc.cluster.local": "10.1.0.1"})
		tab.Settings = &meshdnsv1.AgentSettings{Requires: []string{"query-log"}, Telemetry: &meshdnsv1.Telemetry{QueryLog: ql}}
		cp.Send(discoverytest.Full(version, "n"+version, tab))
		return cp.Recv(t)
	}
	if ack := send("v1", &meshdnsv1.QueryLog{Classes: []string{"nxdomain", "servfail"}, SampleEvery: 5}); ack.GetErrorDetail() != nil {
		t.Fatalf("v1 NACKed: %v", ack.GetErrorDetail())
	}
	want := proxy.QueryLogConfig{Classes: proxy.LogNXDomain | proxy.LogServFail, Sample: 5}
	eventually(t, "the settings' query log", func() bool { return a.run.server.QueryLog() == want })

	if ack := send("v2", &meshdnsv1.QueryLog{Classes: []string{"loud"}}); ack.GetErrorDetail() == nil || !strings.Contains(ack.GetErrorDetail().GetMessage(), "query log class") {
		t.Fatalf("v2 with a bad class: %v, want a NACK naming it", ack)
	}
	if got := a.run.server.QueryLog(); got != want {
		t.Errorf("after a NACKed version: %+v, want %+v", got, want)
	}

	writeAnnotations(t, dir, map[string]string{AnnotationQueryLog: "all"})
	want.Classes = proxy.LogAll
	eventually(t, "the annotation over the settings", func() bool { return a.run.server.QueryLog() == want })

	// /debug/querylog cannot turn off what they set; it raises the
	// sample toward every answer; DELETE goes back.
	if code, body := testenv.HTTP(t, "PUT", a.admin+"/debug/querylog?classes=off", "", nil, ""); code != 403 || !strings.Contains(body, "classes all are set by the operator") {
		t.Errorf("PUT classes=off: %d %q, want 403 naming the operator's classes", code, body)
	}
	body, err := httpPut(a.admin + "/debug/querylog?sample=1")
	if err != nil {
		t.Fatal(err)
	}
	var got proxy.QueryLogConfig
	if err := json.Unmarshal([]byte(body), &got); err != nil || got != (proxy.QueryLogConfig{Classes: proxy.LogAll, Sample: 1}) {
		t.Errorf("PUT sample=1: %q, %v", body, err)
	}
	req, _ := httpNewRequest("DELETE", a.admin+"/debug/querylog")
	if resp, err := httpDo(req); err != nil || resp != 200 {
		t.Fatalf("DELETE: %d, %v", resp, err)
	}
	if got := a.run.server.QueryLog(); got != want {
		t.Errorf("after DELETE: %+v, want %+v", got, want)
	}
}

// FuzzPodAnnotations: any annotations file yields a query log setting or
// an error, never a panic; a file that parses holds only valid settings.
func FuzzPodAnnotations(f *testing.F) {
	f.Add([]byte("meshdns.io/query-log=\"nxdomain,servfail\"\nmeshdns.io/query-log-rate=\"10\"\n")) // as the kubelet writes it
	f.Add([]byte("meshdns.io/query-log-sample=\"-1\""))                                             // a negative number
	f.Add([]byte("a=\"\\u00e9\\n\"\nb=unquoted"))                                                   // escapes, then an unquoted value
	f.Add([]byte("\n\n=\"\"\n"))                                                                    // an empty key
	f.Fuzz(func(t *testing.T, b []byte) {
		ann, err := parseDownwardAnnotations(b)
		if err != nil {
			return
		}
		p, err := queryLogFromAnnotations(ann)
		if err != nil {
			return
		}
		if (p.Sample != nil && *p.Sample < 0) || (p.Rate != nil && *p.Rate < 0) {
			t.Fatalf("negative setting accepted: %+v from %q", p, b)
		}
	})
}
