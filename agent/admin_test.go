package agent

import (
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestAdminEndpoints(t *testing.T) {
	up := startUpstream(t)
	path := writeFile(t, t.TempDir(), "nametable.json", readExample(t))
	a := startAgent(t, Config{NameTableFile: path, Upstreams: []string{up.addr}})
	eventually(t, "ready", a.Ready)
	version := a.run.tables.Current().Version

	t.Run("ready", func(t *testing.T) {
		code, body := httpGet(t, a.admin+"/healthz/ready")
		if code != 200 || !strings.Contains(body, version) {
			t.Errorf("got %d %q", code, body)
		}
	})

	t.Run("live", func(t *testing.T) {
		if code, body := httpGet(t, a.admin+"/healthz/live"); code != 200 || body != "ok\n" {
			t.Errorf("got %d %q", code, body)
		}
	})

	t.Run("nametable", func(t *testing.T) {
		code, body := httpGet(t, a.admin+"/debug/nametable")
		if code != 200 {
			t.Fatalf("got %d %s", code, body)
		}
		var d struct {
			Version        string              `json:"version"`
			Source         string              `json:"source"`
			Table          map[string]any      `json:"table"`
			AlternateNames map[string][]string `json:"alternate_names"`
			Search         []string            `json:"search"`
		}
		if err := json.Unmarshal([]byte(body), &d); err != nil {
			t.Fatal(err)
		}
		if d.Version != version || d.Source != "file" {
			t.Errorf("version %q source %q", d.Version, d.Source)
		}
		if names := d.Table["table"].(map[string]any); len(names) != 5 {
			t.Errorf("table holds %d names, want 5", len(names))
		}
		wantAlt := map[string][]string{
			"web.demo.svc.cluster.local":    {"web.demo", "web.demo.svc", "web"},
			"db.demo.svc.cluster.local":     {"db.demo", "db.demo.svc", "db"},
			"search.demo.svc.cluster.local": {"search.demo", "search.demo.svc", "search"},
		}
		if diff := cmp.Diff(wantAlt, d.AlternateNames); diff != "" {
			t.Errorf("alternate names (-want +got)\n%s", diff)
		}
		if diff := cmp.Diff([]string{"demo.svc.cluster.local", "svc.cluster.local", "cluster.local"}, d.Search); diff != "" {
			t.Errorf("search (-want +got)\n%s", diff)
		}
	})

	t.Run("nametable stored names", func(t *testing.T) {
		_, body := httpGet(t, a.admin+"/debug/nametable?stored=1")
		if !strings.Contains(body, `"_http._tcp.web.demo.svc.cluster.local"`) {
			t.Errorf("stored names miss the SRV name:\n%s", body)
		}
	})

	lookups := []struct {
		name       string
		query      string
		wantSource string
		wantRcode  string
		wantAnswer []string
	}{
		{name: "table", query: "name=web.demo.svc.cluster.local&type=A", wantSource: "table", wantRcode: "NOERROR",
			wantAnswer: []string{"web.demo.svc.cluster.local.\t30\tIN\tA\t10.96.0.20"}},
		{name: "table NXDOMAIN", query: "name=nope.demo.svc.cluster.local", wantSource: "table", wantRcode: "NXDOMAIN"},
		{name: "first forward goes upstream", query: "name=example.com&type=a", wantSource: "upstream", wantRcode: "NOERROR",
			wantAnswer: []string{"example.com.\t300\tIN\tA\t192.0.2.80"}},
		{name: "second comes from the cache", query: "name=example.com&type=A", wantSource: "cache", wantRcode: "NOERROR"},
		{name: "ExternalName chased", query: "name=search.demo.svc.cluster.local", wantSource: "table", wantRcode: "NOERROR",
			wantAnswer: []string{
				"search.demo.svc.cluster.local.\t30\tIN\tCNAME\twww.example.com.",
				"www.example.com.\t300\tIN\tA\t192.0.2.81",
			}},
	}
	for _, tt := range lookups {
		t.Run("lookup "+tt.name, func(t *testing.T) {
			code, body := httpGet(t, a.admin+"/debug/lookup?"+tt.query)
			if code != 200 {
				t.Fatalf("got %d %s", code, body)
			}
			var rep lookupReport
			if err := json.Unmarshal([]byte(body), &rep); err != nil {
				t.Fatal(err)
			}
			if rep.Source != tt.wantSource || rep.Rcode != tt.wantRcode {
				t.Errorf("source %q rcode %q, want %q %q\n%s", rep.Source, rep.Rcode, tt.wantSource, tt.wantRcode, body)
			}
			if tt.wantAnswer != nil {
				if diff := cmp.Diff(tt.wantAnswer, rep.Answer); diff != "" {
					t.Errorf("answer (-want +got)\n%s", diff)
				}
			}
		})
	}

	t.Run("lookup bad request", func(t *testing.T) {
		for _, q := range []string{"", "name=a..b", "name=x.example&type=BOGUS"} {
			if code, _ := httpGet(t, a.admin+"/debug/lookup?"+q); code != 400 {
				t.Errorf("%q: got %d, want 400", q, code)
			}
		}
	})

	t.Run("metrics", func(t *testing.T) {
		// Query once so the serving counters exist.
		exchange(t, "udp", a.dns, "web.demo.svc.cluster.local", 1)
		code, body := httpGet(t, a.admin+"/metrics")
		if code != 200 {
			t.Fatalf("got %d", code)
		}
		for _, want := range []string{
			"meshdns_agent_table_entries 5",
			`meshdns_agent_table_info{source="file",version="` + version + `"} 1`,
			`meshdns_agent_table_updates_total{source="file"} 1`,
			"meshdns_agent_ready 1",
			"meshdns_dns_requests_total",
			"meshdns_upstream_request_duration_seconds",
			"meshdns_cache_hits_total",
		} {
			if !strings.Contains(body, want) {
				t.Errorf("metrics miss %q", want)
			}
		}
	})

	t.Run("pprof", func(t *testing.T) {
		if code, _ := httpGet(t, a.admin+"/debug/pprof/"); code != 200 {
			t.Errorf("got %d", code)
		}
	})

	t.Run("log level", func(t *testing.T) {
		if _, body := httpGet(t, a.admin+"/debug/loglevel"); body != "info\n" {
			t.Errorf("level %q, want info", body)
		}
		resp, err := httpPut(a.admin + "/debug/loglevel?level=debug")
		if err != nil || resp != "debug\n" {
			t.Errorf("set level: %q %v", resp, err)
		}
		if got := a.cfg.LogLevel.Level(); got != slog.LevelDebug {
			t.Errorf("level = %v, want debug", got)
		}
	})
}
