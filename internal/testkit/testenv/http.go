package testenv

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// HTTP sends method to url with the given Host ("" keeps the URL's),
// headers and body ("" for none) and returns the status and the body read
// whole; a transport error fails the test.
func HTTP(t testing.TB, method, url, host string, header map[string]string, body string) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
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
