package agent

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/meshdns/meshdns/internal/testkit/testenv"
	"github.com/meshdns/meshdns/pkg/proxy"
)

// The admin port is not a web page: what a page can make a browser send
// (a POST with text/plain, needing no preflight; a request under the
// page's own name after DNS rebinding; a cross-site fetch) changes
// nothing and reads nothing.
func TestAdminRefusesWebRequests(t *testing.T) {
	up := startUpstream(t)
	path := writeFile(t, t.TempDir(), "nametable.json", readExample(t))
	a := startAgent(t, Config{NameTableFile: path, Upstreams: []string{up.addr}, QueryLogOutput: &testenv.Buffer{}})
	eventually(t, "ready", a.Ready)
	textPlain := map[string]string{"Content-Type": "text/plain"}
	for _, tc := range []struct {
		name, method, path, host string
		header                   map[string]string
		want                     int
	}{
		{name: "POST text/plain query log", method: "POST", path: "/debug/querylog?classes=all&rate=0", header: textPlain, want: 405},
		{name: "POST text/plain log level", method: "POST", path: "/debug/loglevel?level=debug", header: textPlain, want: 405},
		{name: "read as evil.example", method: "GET", path: "/debug/nametable", host: "evil.example", want: 421},
		{name: "lookup as evil.example", method: "GET", path: "/debug/lookup?name=web.demo", host: "evil.example:15020", want: 421},
		{name: "write as evil.example", method: "PUT", path: "/debug/querylog?classes=all&rate=0", host: "evil.example", want: 421},
		{name: "log level as evil.example", method: "PUT", path: "/debug/loglevel?level=debug", host: "evil.example", want: 421},
		{name: "cross-site read", method: "GET", path: "/debug/nametable", header: map[string]string{"Sec-Fetch-Site": "cross-site"}, want: 403},
		{name: "write from another origin", method: "PUT", path: "/debug/querylog?classes=all&rate=0", header: map[string]string{"Origin": "http://evil.example"}, want: 403},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if code, body := testenv.HTTP(t, tc.method, a.admin+tc.path, tc.host, tc.header, ""); code != tc.want {
				t.Errorf("%d %q, want %d", code, body, tc.want)
			}
		})
	}
	if got := a.run.server.QueryLog(); got != (proxy.QueryLogConfig{}) {
		t.Errorf("query log %+v after refused requests, want off", got)
	}
	if got := a.cfg.LogLevel.Level(); got != slog.LevelInfo {
		t.Errorf("log level %v after refused requests, want info", got)
	}
	for _, host := range []string{"localhost", "127.0.0.1", "[::1]"} {
		if code, _ := testenv.HTTP(t, "GET", a.admin+"/debug/nametable", host+":15020", nil, ""); code != 200 {
			t.Errorf("read as %s: %d, want 200", host, code)
		}
	}
}

// The log level may go to more detail at runtime and back, never quieter
// than the operator's; each change is an Info line.
func TestAdminLogLevelFloor(t *testing.T) {
	logs := &testenv.Buffer{}
	a := startAgent(t, Config{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	for _, tc := range []struct {
		level string
		code  int
		want  slog.Level
	}{
		{level: "debug", code: 200, want: slog.LevelDebug},
		{level: "error", code: 403, want: slog.LevelDebug},
		{level: "warn", code: 403, want: slog.LevelDebug},
		{level: "info", code: 200, want: slog.LevelInfo},
	} {
		code, body := testenv.HTTP(t, "PUT", a.admin+"/debug/loglevel?level="+tc.level, "", nil, "")
		if code != tc.code || a.cfg.LogLevel.Level() != tc.want {
			t.Errorf("PUT level=%s: %d %q, level %v; want %d, %v", tc.level, code, body, a.cfg.LogLevel.Level(), tc.code, tc.want)
		}
	}
	for _, want := range []string{"from=info to=debug", "from=debug to=info"} {
		if !strings.Contains(logs.String(), `level=INFO msg="log level changed at runtime"`) || !strings.Contains(logs.String(), want) {
			t.Errorf("no Info line for the change %s:\n%s", want, logs)
		}
	}
	if n := strings.Count(logs.String(), "log level changed"); n != 2 {
		t.Errorf("%d lines for changes, want 2 (refused ones log nothing):\n%s", n, logs)
	}
}
