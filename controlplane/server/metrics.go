package server

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshdns/meshdns/controlplane/auth"
	meshmetrics "github.com/meshdns/meshdns/internal/metrics"
)

type metrics struct {
	agents      prometheus.Gauge
	pushes      *prometheus.CounterVec
	pushBytes   *prometheus.CounterVec
	nacks       prometheus.Counter
	pushLatency prometheus.Histogram
	programming prometheus.Histogram
	streams     *prometheus.CounterVec
	holds       prometheus.Counter
	crashNacks  *prometheus.CounterVec
	quarantined prometheus.GaugeFunc
	// rolloutHeld and canaryTimeouts are the staged rollout's (rollout.go).
	rolloutHeld    prometheus.GaugeFunc
	canaryTimeouts prometheus.Counter

	settingsSent    prometheus.Counter
	settingsChanges prometheus.Counter

	admissionWaiting prometheus.Gauge
	admissions       *prometheus.CounterVec
	connsRefused     *prometheus.CounterVec
	// Children resolved once: a label lookup per send costs more than
	// the rest of the bookkeeping of a delta.
	pushFull, pushDelta           prometheus.Counter
	pushBytesFull, pushBytesDelta prometheus.Counter
}

// push returns the counters of a response kind.
func (m *metrics) push(kind string) (count, bytes prometheus.Counter) {
	if kind == "full" {
		return m.pushFull, m.pushBytesFull
	}
	return m.pushDelta, m.pushBytesDelta
}

// latencyBuckets span 1ms to ~16s: a push to 1,000 agents should land
// well under a second.
var latencyBuckets = prometheus.ExponentialBuckets(0.001, 2, 15)

func newMetrics(reg prometheus.Registerer, q *quarantine, r *rollout) (*metrics, error) {
	m := &metrics{
		agents: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meshdns_controlplane_agents_connected",
			Help: "Agent streams currently connected.",
		}),
		pushes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshdns_controlplane_pushes_total",
			Help: "Responses sent to agents, by kind (full|delta).",
		}, []string{"kind"}),
		pushBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshdns_controlplane_push_bytes_total",
			Help: "Bytes of responses sent to agents, by kind (full|delta).",
		}, []string{"kind"}),
		nacks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meshdns_controlplane_nacks_total",
			Help: "Responses agents rejected (NACK).",
		}),
		pushLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "meshdns_controlplane_push_duration_seconds",
			Help:    "From a version's publication (or the agent's connect, if later) to the agent's ACK of it.",
			Buckets: latencyBuckets,
		}),
		programming: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "meshdns_controlplane_dns_programming_duration_seconds",
			Help:    "From a change at a source (Snapshot.Changed) to an agent's ACK of the version holding it.",
			Buckets: latencyBuckets,
		}),
		streams: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshdns_controlplane_streams_total",
			Help: "Agent streams ended, by result (ok|error|invalid|expired|pod_deleted: the credential that opened the stream expired, or its pod was deleted).",
		}, []string{"result"}),
		holds: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meshdns_controlplane_push_holds_total",
			Help: "Times an agent's next versions were held back because it had not answered what it was sent (8 responses or 32 KiB); it gets the current version in one response when it answers.",
		}),
		crashNacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshdns_controlplane_crash_nacks_total",
			Help: "Agents' reports of a version they crashed running (code ABORTED, on reconnect or on a live stream), by the part blamed (table|settings|both: the parts that differ from the version the agent kept).",
		}, []string{"blame"}),
		quarantined: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "meshdns_controlplane_quarantined_versions",
			Help: "Views whose current table is quarantined: enough agents crashed running it that the others are held at the version before it (this replica's count).",
		}, func() float64 { return float64(q.quarantined()) }),
		rolloutHeld: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "meshdns_controlplane_rollout_held_versions",
			Help: "Views whose current version went to their canaries and is held back from their other agents until every canary ACKed it (this replica's count).",
		}, func() float64 { return float64(r.held()) }),
		canaryTimeouts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meshdns_controlplane_rollout_canary_timeouts_total",
			Help: "Canaries whose stream ended before they ACKed a new version and that neither reconnected nor reported a crash within --canary-timeout; another agent took their place.",
		}),
		settingsSent: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meshdns_controlplane_settings_sent_total",
			Help: "Responses that carried an agent's settings (a full table with settings, or a delta whose settings differ from the agent's).",
		}),
		settingsChanges: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meshdns_controlplane_settings_changes_total",
			Help: "Times a connected agent's settings changed after a settings part changed (each such agent is sent a delta).",
		}),
		admissionWaiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meshdns_controlplane_admission_waiting",
			Help: "Agent streams waiting to be admitted (paced by --max-admissions).",
		}),
		admissions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshdns_controlplane_stream_admissions_total",
			Help: "Agent streams admitted or refused at their first request, by result (ok|invalid|unauthenticated|denied|limited|unavailable) and method (token|spiffe|insecure|none).",
		}, []string{"result", "method"}),
		connsRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshdns_controlplane_connections_refused_total",
			Help: "gRPC connections closed as soon as accepted, by reason (total: the connection limit; peer: the limit of one IP address).",
		}, []string{"reason"}),
	}
	if err := meshmetrics.RegisterAll(reg, "control plane server", []prometheus.Collector{m.agents, m.pushes, m.pushBytes, m.nacks, m.pushLatency, m.programming, m.streams, m.holds, m.crashNacks, m.quarantined, m.rolloutHeld, m.canaryTimeouts, m.settingsSent, m.settingsChanges, m.admissionWaiting, m.admissions, m.connsRefused}); err != nil {
		return nil, err
	}
	// Pre-create the label values so dashboards see zeros, not gaps.
	m.pushFull, m.pushBytesFull = m.pushes.WithLabelValues("full"), m.pushBytes.WithLabelValues("full")
	m.pushDelta, m.pushBytesDelta = m.pushes.WithLabelValues("delta"), m.pushBytes.WithLabelValues("delta")
	for _, r := range []string{"ok", "error", "invalid", "expired", "pod_deleted"} {
		m.streams.WithLabelValues(r)
	}
	m.admissions.WithLabelValues(admitUnauthenticated, "none")
	m.admissions.WithLabelValues(admitLimited, "none")
	for _, b := range []string{blameTable, blameSettings, blameBoth} {
		m.crashNacks.WithLabelValues(b)
	}
	m.connsRefused.WithLabelValues("total")
	m.connsRefused.WithLabelValues("peer")
	for _, method := range []string{auth.MethodToken, auth.MethodSPIFFE} {
		m.admissions.WithLabelValues(admitOK, method)
		m.admissions.WithLabelValues(admitDenied, method)
	}
	return m, nil
}
