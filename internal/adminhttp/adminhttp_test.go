package adminhttp

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

// request describes one request to a test server.
type request struct {
	method, path string
	host         string            // "": the server's address
	header       map[string]string // extra headers
	body         string
}

// send makes req against srv over a real loopback connection and returns
// the status and body.
func send(t testing.TB, srv *httptest.Server, req request) (int, string) {
	t.Helper()
	var body io.Reader
	if req.body != "" {
		body = strings.NewReader(req.body)
	}
	r, err := http.NewRequest(req.method, srv.URL+req.path, body)
	if err != nil {
		t.Fatal(err)
	}
	if req.host != "" {
		r.Host = req.host
	}
	for k, v := range req.header {
		r.Header.Set(k, v)
	}
	resp, err := srv.Client().Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// startGuarded serves a log level (floor info, starting at info) and a
// read-only page behind Guard on 127.0.0.1, and returns the server, the
// level and the log.
func startGuarded(t testing.TB) (*httptest.Server, *slog.LevelVar, *testenv.Buffer) {
	t.Helper()
	level := new(slog.LevelVar)
	floor := slog.LevelInfo
	logs := &testenv.Buffer{}
	mux := http.NewServeMux()
	LogLevel{Var: level, Floor: &floor, Logger: slog.New(slog.NewTextHandler(logs, nil))}.Register(mux)
	mux.HandleFunc("GET /debug/page", func(w http.ResponseWriter, _ *http.Request) { WriteJSON(w, map[string]string{"a": "b"}) })
	Pprof(mux)
	srv := httptest.NewServer(Guard(mux))
	t.Cleanup(srv.Close)
	return srv, level, logs
}

// The port answers a local tool and refuses what a web page can make a
// browser send: another Host (DNS rebinding), a cross-site fetch, a POST.
func TestGuard(t *testing.T) {
	srv, level, _ := startGuarded(t)
	for _, tc := range []struct {
		name string
		req  request
		want int
	}{
		{name: "read by a local tool", req: request{method: "GET", path: "/debug/page"}, want: 200},
		{name: "read as localhost", req: request{method: "GET", path: "/debug/page", host: "localhost:15020"}, want: 200},
		{name: "read as ::1", req: request{method: "GET", path: "/debug/page", host: "[::1]:15020"}, want: 200},
		{name: "HEAD is a read", req: request{method: "HEAD", path: "/debug/page"}, want: 200},
		{name: "profiles", req: request{method: "GET", path: "/debug/pprof/"}, want: 200},
		{name: "read for another host", req: request{method: "GET", path: "/debug/page", host: "evil.example"}, want: 421},
		{name: "write for another host", req: request{method: "PUT", path: "/debug/loglevel?level=debug", host: "evil.example:15020"}, want: 421},
		{name: "POST text/plain", req: request{method: "POST", path: "/debug/loglevel?level=debug", header: map[string]string{"Content-Type": "text/plain"}}, want: 405},
		{name: "POST a form", req: request{method: "POST", path: "/debug/loglevel", header: map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, body: "level=debug"}, want: 405},
		{name: "PATCH", req: request{method: "PATCH", path: "/debug/loglevel?level=debug"}, want: 405},
		{name: "OPTIONS (a preflight)", req: request{method: "OPTIONS", path: "/debug/loglevel", header: map[string]string{"Origin": "http://evil.example", "Access-Control-Request-Method": "PUT"}}, want: 403},
		{name: "POST profile symbols", req: request{method: "POST", path: "/debug/pprof/symbol"}, want: 405},
		{name: "cross-site GET", req: request{method: "GET", path: "/debug/page", header: map[string]string{"Sec-Fetch-Site": "cross-site"}}, want: 403},
		{name: "same-site GET (another port)", req: request{method: "GET", path: "/debug/page", header: map[string]string{"Sec-Fetch-Site": "same-site"}}, want: 403},
		{name: "typed into the address bar", req: request{method: "GET", path: "/debug/page", header: map[string]string{"Sec-Fetch-Site": "none"}}, want: 200},
		{name: "the port's own page", req: request{method: "GET", path: "/debug/pprof/heap", header: map[string]string{"Sec-Fetch-Site": "same-origin"}}, want: 200},
		{name: "origin of another site", req: request{method: "PUT", path: "/debug/loglevel?level=debug", header: map[string]string{"Origin": "http://evil.example"}}, want: 403},
		{name: "origin null", req: request{method: "GET", path: "/debug/page", header: map[string]string{"Origin": "null"}}, want: 403},
		{name: "loopback origin", req: request{method: "GET", path: "/debug/page", header: map[string]string{"Origin": "http://127.0.0.1:15020"}}, want: 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := send(t, srv, tc.req)
			if code != tc.want {
				t.Errorf("%s %s: %d %q, want %d", tc.req.method, tc.req.path, code, body, tc.want)
			}
		})
	}
	if got := level.Level(); got != slog.LevelInfo {
		t.Errorf("level %v after refused changes, want info", got)
	}
}

// A refused method names the allowed ones.
func TestGuardAllowHeader(t *testing.T) {
	srv, _, _ := startGuarded(t)
	r, _ := http.NewRequest("POST", srv.URL+"/debug/loglevel?level=debug", strings.NewReader("x"))
	r.Header.Set("Content-Type", "text/plain")
	resp, err := srv.Client().Do(r)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 405 || resp.Header.Get("Allow") != Allowed {
		t.Errorf("POST: %d, Allow %q; want 405, %q", resp.StatusCode, resp.Header.Get("Allow"), Allowed)
	}
	if got := resp.Header.Get("X-Content-Type-Options"); got != "nosniff" {
		t.Errorf("X-Content-Type-Options %q, want nosniff", got)
	}
}

func TestLogLevel(t *testing.T) {
	srv, level, logs := startGuarded(t)
	for _, tc := range []struct {
		name     string
		req      request
		wantCode int
		wantBody string
		want     slog.Level
	}{
		{name: "show", req: request{method: "GET", path: "/debug/loglevel"}, wantCode: 200, wantBody: "info\n", want: slog.LevelInfo},
		{name: "more detail", req: request{method: "PUT", path: "/debug/loglevel?level=debug"}, wantCode: 200, wantBody: "debug\n", want: slog.LevelDebug},
		{name: "back to the floor by JSON", req: request{method: "PUT", path: "/debug/loglevel", header: map[string]string{"Content-Type": "application/json"}, body: `{"level": "INFO"}`},
			wantCode: 200, wantBody: "info\n", want: slog.LevelInfo},
		{name: "quieter than the operator", req: request{method: "PUT", path: "/debug/loglevel?level=error"}, wantCode: 403, want: slog.LevelInfo},
		{name: "bad level", req: request{method: "PUT", path: "/debug/loglevel?level=loud"}, wantCode: 400, want: slog.LevelInfo},
		{name: "typo in the parameter", req: request{method: "PUT", path: "/debug/loglevel?levle=debug"}, wantCode: 400, want: slog.LevelInfo},
		{name: "text body", req: request{method: "PUT", path: "/debug/loglevel", header: map[string]string{"Content-Type": "text/plain"}, body: "debug"}, wantCode: 400, want: slog.LevelInfo},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := send(t, srv, tc.req)
			if code != tc.wantCode || (tc.wantBody != "" && body != tc.wantBody) {
				t.Errorf("got %d %q, want %d %q", code, body, tc.wantCode, tc.wantBody)
			}
			if got := level.Level(); got != tc.want {
				t.Errorf("level %v, want %v", got, tc.want)
			}
		})
	}
	for _, want := range []string{
		`level=INFO msg="log level changed at runtime" endpoint=/debug/loglevel from=info to=debug`,
		`level=INFO msg="log level changed at runtime" endpoint=/debug/loglevel from=debug to=info`,
	} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs)
		}
	}
	if n := strings.Count(logs.String(), "\n"); n != 2 {
		t.Errorf("%d log lines, want 2 (refused changes log nothing):\n%s", n, logs)
	}
}

// A fixed level answers 501 to both methods, on the agent as on the
// control plane.
func TestLogLevelFixed(t *testing.T) {
	mux := http.NewServeMux()
	LogLevel{}.Register(mux)
	srv := httptest.NewServer(Guard(mux))
	t.Cleanup(srv.Close)
	for _, m := range []string{"GET", "PUT"} {
		if code, _ := send(t, srv, request{method: m, path: "/debug/loglevel?level=debug"}); code != http.StatusNotImplemented {
			t.Errorf("%s: %d, want 501", m, code)
		}
	}
}

func TestParams(t *testing.T) {
	for _, tc := range []struct {
		name    string
		query   string
		ctype   string
		body    string
		want    map[string]string
		wantErr string
	}{
		{name: "query", query: "classes=denied&rate=5", want: map[string]string{"classes": "denied", "rate": "5"}},
		{name: "JSON body", ctype: "application/json; charset=utf-8", body: `{"classes": "denied,nxdomain", "sample": 1, "rate": 0}`,
			want: map[string]string{"classes": "denied,nxdomain", "sample": "1", "rate": "0"}},
		{name: "JSON list", ctype: "application/json", body: `{"classes": ["denied", "nxdomain"]}`, want: map[string]string{"classes": "denied,nxdomain"}},
		{name: "query and body", query: "rate=5", ctype: "application/json", body: `{"sample": 2}`, want: map[string]string{"rate": "5", "sample": "2"}},
		{name: "twice", query: "rate=5", ctype: "application/json", body: `{"rate": 6}`, wantErr: `parameter "rate" given 2 times`},
		{name: "unknown", query: "clases=off", wantErr: `unknown parameter "clases"`},
		{name: "unknown in the body", ctype: "application/json", body: `{"clases": "off"}`, wantErr: `unknown parameter "clases"`},
		{name: "text body", ctype: "text/plain", body: "classes=off", wantErr: "want application/json"},
		{name: "no type", body: `{"rate": 1}`, wantErr: "want application/json"},
		{name: "not an object", ctype: "application/json", body: `["denied"]`, wantErr: "body"},
		{name: "null", ctype: "application/json", body: `null`, wantErr: "want a JSON object"},
		{name: "two values", ctype: "application/json", body: `{"rate": 1} {"rate": 2}`, wantErr: "more than one"},
		{name: "a bool", ctype: "application/json", body: `{"rate": true}`, wantErr: `body field "rate"`},
		{name: "a list of numbers", ctype: "application/json", body: `{"classes": [1]}`, wantErr: "list of strings"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("PUT", "/debug/querylog?"+tc.query, strings.NewReader(tc.body))
			if tc.body == "" {
				r.Body, r.ContentLength = http.NoBody, 0
			}
			if tc.ctype != "" {
				r.Header.Set("Content-Type", tc.ctype)
			}
			v, err := Params(r, "classes", "sample", "rate")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for k := range v {
				got[k] = v.Get(k)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
}

// FuzzParams: any body yields parameters of the given names, one value
// each, or an error; never a panic.
func FuzzParams(f *testing.F) {
	f.Add("classes=denied", `{"classes": ["denied", "nxdomain"], "rate": 0}`) // a list and a number
	f.Add("", `{"sample": 1e400}`)                                            // a number no int holds
	f.Add("rate=1", `{"rate": "2"}`)                                          // a name given twice
	f.Add("", `{"classes": null}`)                                            // a null field
	f.Add("", "{\"a\":1}{")                                                   // trailing garbage
	f.Fuzz(func(t *testing.T, query, body string) {
		r := httptest.NewRequest("PUT", "/debug/querylog", strings.NewReader(body))
		r.URL.RawQuery = query
		r.Header.Set("Content-Type", "application/json")
		v, err := Params(r, "classes", "sample", "rate")
		if err != nil {
			return
		}
		for name, vals := range v {
			if name != "classes" && name != "sample" && name != "rate" || len(vals) != 1 {
				t.Fatalf("accepted %q = %q from query %q body %q", name, vals, query, body)
			}
		}
	})
}
