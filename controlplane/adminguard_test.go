package controlplane_test

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/meshdns/meshdns/controlplane"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

// The control plane's admin port refuses what a web page can make a
// browser send, as the agent's does (the same guard): a POST with
// text/plain, a request under another Host (DNS rebinding), a cross-site
// fetch. An accepted change is an Info line.
func TestAdminRefusesWebRequests(t *testing.T) {
	level := new(slog.LevelVar)
	var logs testenv.Buffer
	r := start(t, controlplane.Config{Entries: []string{t.TempDir()}, Level: level, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	textPlain := map[string]string{"Content-Type": "text/plain"}
	for _, tc := range []struct {
		name, method, path, host string
		header                   map[string]string
		want                     int
	}{
		{name: "POST text/plain log level", method: "POST", path: "/debug/loglevel?level=debug", header: textPlain, want: 405},
		{name: "read agents as evil.example", method: "GET", path: "/debug/agents", host: "evil.example", want: 421},
		{name: "read a table as evil.example", method: "GET", path: "/debug/nametable?namespace=demo", host: "evil.example:15014", want: 421},
		{name: "profile as evil.example", method: "GET", path: "/debug/pprof/", host: "evil.example", want: 421},
		{name: "write as evil.example", method: "PUT", path: "/debug/loglevel?level=debug", host: "evil.example", want: 421},
		{name: "cross-site read", method: "GET", path: "/debug/agents", header: map[string]string{"Sec-Fetch-Site": "cross-site"}, want: 403},
		{name: "write from another origin", method: "PUT", path: "/debug/loglevel?level=debug", header: map[string]string{"Origin": "http://evil.example"}, want: 403},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if code, body := testenv.HTTP(t, tc.method, r.admin+tc.path, tc.host, tc.header, ""); code != tc.want {
				t.Errorf("%d %q, want %d", code, body, tc.want)
			}
		})
	}
	if got := level.Level(); got != slog.LevelInfo {
		t.Errorf("log level %v after refused requests, want info", got)
	}
	if strings.Contains(logs.String(), "log level changed") {
		t.Errorf("a refused request logged a change:\n%s", logs.String())
	}
	for _, host := range []string{"localhost:15014", "127.0.0.1", "[::1]:1"} {
		if code, _ := testenv.HTTP(t, "GET", r.admin+"/debug/agents", host, nil, ""); code != 200 {
			t.Errorf("read as %s: %d, want 200", host, code)
		}
	}
	if code, body := testenv.HTTP(t, "PUT", r.admin+"/debug/loglevel?level=debug", "localhost:15014", nil, ""); code != 200 || body != "debug\n" {
		t.Errorf("PUT level=debug: %d %q", code, body)
	}
	if !strings.Contains(logs.String(), `level=INFO msg="log level changed at runtime" component=admin endpoint=/debug/loglevel from=info to=debug`) {
		t.Errorf("no Info line for the change:\n%s", logs.String())
	}
}
