// Package deps fills in the dependencies every control plane component
// takes from its Config (clock, logger, metrics registry) when the caller
// left them nil, so each constructor states its own defaults only.
package deps

import (
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Now returns now, or time.Now when now is nil.
func Now(now func() time.Time) func() time.Time {
	if now == nil {
		return time.Now
	}
	return now
}

// Logger returns l, or a logger that discards everything when l is nil.
func Logger(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.New(slog.DiscardHandler)
	}
	return l
}

// Registerer returns r, or a private registry when r is nil, so metrics
// of components built without one never collide.
func Registerer(r prometheus.Registerer) prometheus.Registerer {
	if r == nil {
		return prometheus.NewRegistry()
	}
	return r
}
