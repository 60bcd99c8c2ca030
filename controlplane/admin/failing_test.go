package admin

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshdns/meshdns/controlplane/server"
	"github.com/meshdns/meshdns/controlplane/view"
)

type fakeAgents []server.AgentInfo

func (f fakeAgents) Agents() []server.AgentInfo        { return f }
func (fakeAgents) AgentView(string, string) *view.View { return nil }
func (fakeAgents) Quarantine() []server.QuarantineInfo { return nil }

func TestDebugFailing(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	report := func(names ...server.FailingName) *server.FailingReport {
		return &server.FailingReport{Received: at, WindowSeconds: 60, Names: append([]server.FailingName{}, names...)}
	}
	nx := server.FailingName{Name: "x.example.", Rcode: "NXDOMAIN", Count: 5}
	sf := server.FailingName{Name: "y.example.", Rcode: "SERVFAIL", Count: 2}
	agents := fakeAgents{
		{Namespace: "a", Pod: "web-0", InstanceID: "i1", Failing: report(nx, sf)},
		{Namespace: "a", Pod: "web-1", InstanceID: "i2"}, // no report
		{Namespace: "b", Pod: "db-0", InstanceID: "i3", Failing: report(sf)},
		{Namespace: "b", Pod: "db-1", InstanceID: "i4", Failing: report()},
	}
	views, err := view.New(view.Config{Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	h, err := New(Config{Gatherer: prometheus.NewRegistry(), Agents: agents, Views: views})
	if err != nil {
		t.Fatal(err)
	}
	pod := func(ns, name, id string, names ...server.FailingName) PodFailing {
		return PodFailing{Namespace: ns, Pod: name, InstanceID: id, FailingReport: *report(names...)}
	}
	for _, tc := range []struct {
		name  string
		query string
		want  []PodFailing
	}{
		{name: "every report", query: "", want: []PodFailing{
			pod("a", "web-0", "i1", nx, sf), pod("b", "db-0", "i3", sf), pod("b", "db-1", "i4")}},
		{name: "one namespace", query: "?namespace=b", want: []PodFailing{pod("b", "db-0", "i3", sf), pod("b", "db-1", "i4")}},
		{name: "which pods fail for a name", query: "?name=Y.example", want: []PodFailing{
			pod("a", "web-0", "i1", sf), pod("b", "db-0", "i3", sf)}},
		{name: "by rcode", query: "?rcode=nxdomain", want: []PodFailing{pod("a", "web-0", "i1", nx)}},
		{name: "nothing matches", query: "?name=z.example.", want: []PodFailing{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://127.0.0.1:15014/debug/failing"+tc.query, nil))
			if rec.Code != http.StatusOK {
				t.Fatalf("status %d: %s", rec.Code, rec.Body)
			}
			var got []PodFailing
			if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("/debug/failing%s (-want +got):\n%s", tc.query, diff)
			}
		})
	}
}
