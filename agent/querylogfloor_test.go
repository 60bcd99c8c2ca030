package agent

import (
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/agent/discovery/discoverytest"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
	"github.com/meshdns/meshdns/pkg/proxy"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

func TestCheckRaise(t *testing.T) {
	denied := proxy.QueryLogConfig{Classes: proxy.LogDenied, Rate: 100}
	cls := func(s string) *proxy.QueryLogClass {
		c, err := proxy.ParseQueryLogClasses(s)
		if err != nil {
			t.Fatal(err)
		}
		return &c
	}
	for _, tc := range []struct {
		name    string
		floor   proxy.QueryLogConfig
		req     queryLogPatch
		wantErr string
	}{
		{name: "turn off", floor: denied, req: queryLogPatch{Classes: cls("off")}, wantErr: "classes denied are set by the operator"},
		{name: "swap classes", floor: denied, req: queryLogPatch{Classes: cls("nxdomain")}, wantErr: `ask for "denied,nxdomain"`},
		{name: "add under the cap", floor: denied, req: queryLogPatch{Classes: cls("denied,nxdomain")}, wantErr: "classes nxdomain added under a cap of 100"},
		{name: "add, lifting the cap", floor: denied, req: queryLogPatch{Classes: cls("denied,nxdomain"), Rate: ptrTo(0)}},
		{name: "all covers denied", floor: denied, req: queryLogPatch{Classes: cls("all"), Rate: ptrTo(0)}},
		{name: "same classes under the cap", floor: denied, req: queryLogPatch{Classes: cls("denied")}},
		{name: "sample thinner", floor: denied, req: queryLogPatch{Sample: ptrTo(10)}, wantErr: "sample 10: one answer in 1"},
		{name: "sample 1 over 0", floor: denied, req: queryLogPatch{Sample: ptrTo(1)}},
		{name: "sample toward 1", floor: proxy.QueryLogConfig{Classes: proxy.LogDenied, Sample: 10}, req: queryLogPatch{Sample: ptrTo(5)}},
		{name: "rate lower", floor: denied, req: queryLogPatch{Rate: ptrTo(50)}, wantErr: "rate 50: rate 100 (at most 100 lines a second)"},
		{name: "rate higher", floor: denied, req: queryLogPatch{Rate: ptrTo(200)}},
		{name: "a cap where there was none", floor: proxy.QueryLogConfig{Classes: proxy.LogDenied}, req: queryLogPatch{Rate: ptrTo(1000)}, wantErr: "rate 0 (no cap)"},
		{name: "an off floor takes anything", floor: proxy.QueryLogConfig{Rate: 100}, req: queryLogPatch{Classes: cls("nxdomain"), Sample: ptrTo(10), Rate: ptrTo(1)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkRaise(tc.floor, tc.req, raise(tc.floor, tc.req))
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if _, ok := err.(*floorError); !ok || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err %v, want a floorError with %q", err, tc.wantErr)
			}
		})
	}
}

// The pod cannot blind its own audit trail: with the operator's
// --query-log denied, no request a process of the pod can make to the
// admin port turns the denial lines off, whatever the form; a request
// that adds to them works, by query or JSON body, and is logged at Info;
// the denial lines do not depend on the agent's log level.
func TestQueryLogFloorKeepsDenials(t *testing.T) {
	up := startNamesUpstream(t)
	cp := discoverytest.Start(t, "127.0.0.1:0", nil)
	qlog, logs := &testenv.Buffer{}, &testenv.Buffer{}
	a := startAgent(t, Config{ControlPlanes: []string{cp.Addr}, StateDir: t.TempDir(), Upstreams: []string{up.addr}, PodName: "web-0",
		QueryLogOutput: qlog, QueryLog: proxy.QueryLogConfig{Classes: proxy.LogDenied, Rate: 100},
		Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	cp.Recv(t)
	v1 := cpTable(map[string]string{"a.demo.svc.cluster.local": "10.1.0.1"})
	v1.Settings = &meshdnsv1.AgentSettings{Requires: []string{"policy"}, Policy: &meshdnsv1.DNSPolicy{OutsideDefault: deny}}
	cp.Send(discoverytest.Full("v1", "n1", v1))
	if ack := cp.Recv(t); ack.GetErrorDetail() != nil {
		t.Fatalf("v1 NACKed: %v", ack.GetErrorDetail())
	}
	floor := proxy.QueryLogConfig{Classes: proxy.LogDenied, Rate: 100}
	jsonBody := map[string]string{"Content-Type": "application/json"}
	for _, tc := range []struct {
		name, method, path string
		header             map[string]string
		body               string
		want               int
	}{
		{name: "PUT classes=off", method: "PUT", path: "/debug/querylog?classes=off", want: 403},
		{name: "PUT another class", method: "PUT", path: "/debug/querylog?classes=nxdomain", want: 403},
		{name: "PUT JSON off", method: "PUT", path: "/debug/querylog", header: jsonBody, body: `{"classes": "off"}`, want: 403},
		{name: "PUT a thinner sample", method: "PUT", path: "/debug/querylog?sample=1000", want: 403},
		{name: "PUT a lower rate", method: "PUT", path: "/debug/querylog?rate=1", want: 403},
		{name: "PUT all under the cap", method: "PUT", path: "/debug/querylog?classes=all", want: 403},
		{name: "POST text/plain", method: "POST", path: "/debug/querylog?classes=off", header: map[string]string{"Content-Type": "text/plain"}, want: 405},
		{name: "PUT a text body", method: "PUT", path: "/debug/querylog", header: map[string]string{"Content-Type": "text/plain"}, body: "classes=off", want: 400},
		{name: "PUT a misspelt parameter", method: "PUT", path: "/debug/querylog?clases=off", want: 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if code, body := testenv.HTTP(t, tc.method, a.admin+tc.path, "", tc.header, tc.body); code != tc.want {
				t.Errorf("%d %q, want %d", code, body, tc.want)
			}
			if got := a.run.server.QueryLog(); got != floor {
				t.Errorf("query log %+v, want the operator's %+v", got, floor)
			}
		})
	}
	if code, body := testenv.HTTP(t, "PUT", a.admin+"/debug/querylog?classes=off", "", nil, ""); !strings.Contains(body, "classes denied are set by the operator") {
		t.Errorf("PUT classes=off: %d %q, want a message naming denied", code, body)
	}

	// Quieter own logs, as an operator may set them: the denial's line
	// is written all the same.
	a.cfg.LogLevel.Set(slog.LevelError)
	exchange(t, "udp", a.dns, "leak.example.com", dns.TypeA)
	if !strings.Contains(qlog.String(), `"qname":"leak.example.com."`) || !strings.Contains(qlog.String(), `"action":"deny"`) {
		t.Errorf("no denial line after the refused requests:\n%s", qlog)
	}
	a.cfg.LogLevel.Set(slog.LevelInfo)

	// Adding, by a JSON body, with the cap lifted: accepted and logged.
	code, body := testenv.HTTP(t, "PUT", a.admin+"/debug/querylog", "", jsonBody, `{"classes": ["denied", "nxdomain"], "rate": 0}`)
	var got proxy.QueryLogConfig
	if err := json.Unmarshal([]byte(body), &got); code != 200 || err != nil {
		t.Fatalf("PUT JSON: %d %q %v", code, body, err)
	}
	if want := (proxy.QueryLogConfig{Classes: proxy.LogDenied | proxy.LogNXDomain}); got != want || a.run.server.QueryLog() != want {
		t.Errorf("after PUT JSON: %+v (server %+v), want %+v", got, a.run.server.QueryLog(), want)
	}
	if code, _ := testenv.HTTP(t, "DELETE", a.admin+"/debug/querylog", "", nil, ""); code != 200 || a.run.server.QueryLog() != floor {
		t.Errorf("DELETE: %d, query log %+v, want %+v", code, a.run.server.QueryLog(), floor)
	}
	changes := changeLines(t, logs.String())
	want := []string{
		`PUT /debug/querylog {"classes":"denied","rate":100,"sample":0} -> {"classes":"denied,nxdomain","rate":0,"sample":0}`,
		`DELETE /debug/querylog {"classes":"denied,nxdomain","rate":0,"sample":0} -> {"classes":"denied","rate":100,"sample":0}`,
	}
	if strings.Join(changes, "\n") != strings.Join(want, "\n") {
		t.Errorf("change lines:\n%s\nwant:\n%s", strings.Join(changes, "\n"), strings.Join(want, "\n"))
	}
}

// changeLines returns the Info lines of accepted query log changes in the
// agent's JSON log as "by from -> to".
func changeLines(t testing.TB, log string) []string {
	t.Helper()
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(log), "\n") {
		var l struct {
			Level, Msg, By string
			From, To       map[string]any
		}
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		if l.Msg != "query log changed at runtime" {
			continue
		}
		if l.Level != "INFO" {
			t.Errorf("change logged at %s: %s", l.Level, line)
		}
		from, _ := json.Marshal(l.From)
		to, _ := json.Marshal(l.To)
		out = append(out, l.By+" "+string(from)+" -> "+string(to))
	}
	return out
}
