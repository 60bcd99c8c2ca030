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

// quarantined is an agent list whose server quarantined q.
type quarantined struct {
	fakeAgents
	q []server.QuarantineInfo
}

func (a quarantined) Quarantine() []server.QuarantineInfo { return a.q }

func TestDebugQuarantine(t *testing.T) {
	want := []server.QuarantineInfo{{Namespace: "shop", ClusterDomain: "cluster.local", Version: "a042784bd7ecd3bf",
		Reports: 3, Threshold: 3, Quarantined: true, HeldAt: "777e18f805f9bb1b",
		Since: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Reason: "agent died running a042784bd7ecd3bf", LastAgent: "shop/web-2/"}}
	views, err := view.New(view.Config{Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	h, err := New(Config{Gatherer: prometheus.NewRegistry(), Agents: quarantined{q: want}, Views: views})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://127.0.0.1:15014/debug/quarantine", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	var got []server.QuarantineInfo
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("/debug/quarantine (-want +got):\n%s", diff)
	}
}
