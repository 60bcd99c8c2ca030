package main

import (
	"github.com/meshdns/meshdns/cmd/internal/cli"
	"github.com/prometheus/client_golang/prometheus"
)

// buildInfoCollector is meshdns_build_info for the control plane's
// client_golang registry (see cli.BuildInfoName).
func buildInfoCollector() prometheus.Collector {
	b := cli.BuildInfo()
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        cli.BuildInfoName,
		Help:        cli.BuildInfoHelp,
		ConstLabels: prometheus.Labels{"version": b.Version, "revision": b.Revision, "goversion": b.GoVersion},
	}, func() float64 { return 1 })
}
