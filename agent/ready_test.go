package agent

import (
	"net/http"
	"strings"
	"testing"

	"github.com/meshdns/meshdns/agent/ingest"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

// TestReadyOnFirstGoodFile: a table file that is rejected leaves the agent
// unready (a pod must not join its Service without names to answer), and
// the first good table makes it ready, signalled by the apply itself.
func TestReadyOnFirstGoodFile(t *testing.T) {
	up := startUpstream(t)
	path := writeFile(t, t.TempDir(), "nametable.json", `{"table": `)
	a := startAgent(t, Config{NameTableFile: path, Upstreams: []string{up.addr}})
	rejections := func() float64 {
		return counter(t, a.cfg.Registry, "meshdns_agent_table_rejections_total", "source", ingest.SourceFile)
	}
	// The first load happens before Run serves; once it is counted the
	// agent has decided about this file.
	eventually(t, "the bad file rejected", func() bool { return rejections() >= 1 })
	if a.Ready() {
		t.Fatal("ready after a rejected table file")
	}
	if code, body := httpGet(t, a.admin+"/healthz/ready"); code != http.StatusServiceUnavailable {
		t.Errorf("/healthz/ready = %d %q, want 503", code, body)
	}

	testenv.ReplaceFile(t, path, tableJSON("a.demo.svc.cluster.local", "10.0.0.1"))
	eventually(t, "ready after a good file", a.Ready)
	code, body := httpGet(t, a.admin+"/healthz/ready")
	if code != http.StatusOK || !strings.Contains(body, "from file") {
		t.Errorf("/healthz/ready = %d %q, want 200 and the file as source", code, body)
	}
	if got := a.m.ready.Value(); got != 1 {
		t.Errorf("ready gauge = %v, want 1", got)
	}
}
