//go:build !agentonly

package main

import "github.com/prometheus/client_golang/prometheus"

// buildInfoCollector is meshdns_build_info for the control plane's
// client_golang registry (see version.go).
func buildInfoCollector() prometheus.Collector {
	b := buildInfo()
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        buildInfoName,
		Help:        buildInfoHelp,
		ConstLabels: prometheus.Labels{"version": b.Version, "revision": b.Revision, "goversion": b.GoVersion},
	}, func() float64 { return 1 })
}
