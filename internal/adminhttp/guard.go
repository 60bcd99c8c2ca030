// Package adminhttp is what the agent's and the control plane's admin
// ports share: the guard that keeps them from being reached by anything
// but a program on this machine asking on purpose, the method rule, the
// log level endpoint, the parameters of a change, the JSON writer and the
// profiles. Both admin handlers use it, so the two ports answer the same
// request the same way. It imports the standard library and
// internal/loopback only: the sidecar links it.
package adminhttp

import (
	"fmt"
	"net/http"
	"net/url"

	"github.com/meshdns/meshdns/internal/loopback"
)

// Allowed is the Allow header of a refused method: reads by GET (and
// HEAD), changes by PUT or DELETE, which a browser never sends across
// sites without a CORS preflight that the admin port does not answer.
const Allowed = "GET, HEAD, PUT, DELETE"

// Guard serves h only the requests a local tool makes on purpose:
//
//   - the Host header must name localhost or a loopback address, else 421:
//     a web page whose name an attacker points at 127.0.0.1 (DNS
//     rebinding) sends its own name;
//   - a browser's cross-site request is refused with 403, found by
//     Sec-Fetch-Site (other than same-origin or none) or an Origin that is
//     not loopback: a page cannot even make the port run a lookup or a
//     profile;
//   - methods other than GET, HEAD, PUT and DELETE get 405: POST (a form,
//     or fetch with text/plain) is what a browser sends without a
//     preflight, so nothing on the port changes state by it.
//
// Every response carries X-Content-Type-Options: nosniff.
func Guard(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if !loopback.Host(r.Host) {
			http.Error(w, fmt.Sprintf("host %q: the admin port answers requests for localhost or a loopback address only", r.Host),
				http.StatusMisdirectedRequest)
			return
		}
		if reason := crossSite(r); reason != "" {
			http.Error(w, reason+": the admin port does not serve web pages of other sites", http.StatusForbidden)
			return
		}
		switch r.Method {
		case http.MethodGet, http.MethodHead, http.MethodPut, http.MethodDelete:
		default:
			w.Header().Set("Allow", Allowed)
			http.Error(w, fmt.Sprintf("method %s not allowed: reads by GET, changes by PUT or DELETE", r.Method), http.StatusMethodNotAllowed)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// crossSite says why r comes from another site's page, or "". Tools
// (curl, the meshdns commands, Prometheus) send neither header; a browser
// sends Sec-Fetch-Site "none" for what its user typed and "same-origin"
// for the port's own pages (pprof's index links).
func crossSite(r *http.Request) string {
	switch site := r.Header.Get("Sec-Fetch-Site"); site {
	case "", "none", "same-origin":
	default:
		return "Sec-Fetch-Site " + site
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return ""
	}
	if u, err := url.Parse(origin); err == nil && (u.Scheme == "http" || u.Scheme == "https") && loopback.Host(u.Host) {
		return ""
	}
	return fmt.Sprintf("origin %q", origin)
}
