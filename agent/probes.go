package agent

import (
	"fmt"
	"net/http"

	"github.com/meshdns/meshdns/internal/loopback"
)

// probeHandler serves what the kubelet and Prometheus need on the pod IP,
// and nothing that changes state or reveals a name: readiness, liveness,
// metrics (whose labels are bounded, never a query name).
func (a *Agent) probeHandler() http.Handler {
	mux := http.NewServeMux()
	a.probeRoutes(mux)
	return mux
}

func (a *Agent) probeRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /healthz/ready", a.handleReady)
	// Liveness says only that the process serves HTTP: a pod waiting for
	// its first table must not be restarted for it.
	mux.HandleFunc("GET /healthz/live", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.Handle("GET /metrics", a.cfg.Registry.Handler())
}

// adminListenAddr returns the address the admin port listens on: addr
// with "localhost" mapped to 127.0.0.1 (never looked up in /etc/hosts),
// or "-" (off); an error unless it is a loopback one.
func adminListenAddr(addr string) (string, error) {
	if addr == "-" {
		return addr, nil
	}
	return loopback.ListenAddr(addr)
}

// lookupLimit bounds the /debug/lookup requests served at once, so asking
// the agent to resolve names never takes more than this many of the
// forwarder's in-flight slots from the application; beyond it, 429.
type lookupLimit chan struct{}

// maxDebugLookups is the bound of lookupLimit.
const maxDebugLookups = 2

func (l lookupLimit) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case l <- struct{}{}:
			defer func() { <-l }()
			h.ServeHTTP(w, r)
		default:
			http.Error(w, fmt.Sprintf("%d debug lookups in flight already", cap(l)), http.StatusTooManyRequests)
		}
	})
}
