package adminhttp

import (
	"net/http"
	"net/http/pprof"
)

// Pprof adds the profiles under /debug/pprof/ to mux, by GET only (the
// symbol lookup's POST form is left out: profiles carry their symbols).
// Importing net/http/pprof also registers them on http.DefaultServeMux,
// which nothing of ours serves.
func Pprof(mux *http.ServeMux) {
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
}
