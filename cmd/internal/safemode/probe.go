package safemode

import (
	"fmt"
	"net"
	"net/http"
	"time"
)

// serveProbe serves the agent's probe endpoints on ProbeAddr while the
// episode runs:
//   - /healthz/ready: 200 "safe mode: <reason>" while forwarding (the
//     pod's lookups work: taking it out of its Services would turn a
//     degraded DNS into an outage of the application), 503 while refusing
//     (the pod's lookups fail: an unready pod is the truthful signal);
//   - /healthz/live: 200 (restarting the container would not help: the
//     supervisor keeps trying the agent, and holds the socket queues);
//   - /metrics: the supervisor's registry.
func (s *Server) serveProbe(e *episode) (*http.Server, error) {
	l, err := net.Listen("tcp", s.cfg.ProbeAddr)
	if err != nil {
		return nil, fmt.Errorf("probe address: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz/ready", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if e.mode.Refusing() {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "safe mode, refusing every query (%s): %s\n", refuseWhy(e.mode), e.reason)
			return
		}
		fmt.Fprintf(w, "safe mode: %s\n", e.reason)
	})
	mux.HandleFunc("/healthz/live", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "safe mode: %s\n", e.reason)
	})
	if s.cfg.Registry != nil {
		mux.Handle("/metrics", s.cfg.Registry.Handler())
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(l)
	return srv, nil
}

func refuseWhy(m Mode) string {
	if m.Policy.Enforcing {
		return m.Policy.Why
	}
	return "no plain DNS upstream"
}
