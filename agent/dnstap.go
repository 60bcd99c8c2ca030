package agent

import (
	"fmt"

	meshmetrics "github.com/meshdns/meshdns/internal/metrics"
	"github.com/meshdns/meshdns/pkg/dnstap"
	"github.com/meshdns/meshdns/pkg/proxy"
	"github.com/meshdns/meshdns/pkg/proxy/upstream"
)

// dnstapTap turns the answers the query log writes into dnstap frames: a
// CLIENT_QUERY and a CLIENT_RESPONSE each, the query from the pod's
// address to the agent's socket, and between them, for an answer this
// query fetched upstream, FORWARDER_QUERY and FORWARDER_RESPONSE from the
// agent's socket to the upstream. Identity names the pod, so a collector
// shared by many pods tells them apart.
type dnstapTap struct {
	w                 *dnstap.Writer
	identity, version string
}

var _ proxy.Tap = (*dnstapTap)(nil)

func newDnstapTap(cfg Config) (*dnstapTap, error) {
	w, err := dnstap.New(dnstap.Config{Address: cfg.Dnstap, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	id := cfg.PodName
	if cfg.Namespace != "" {
		id = cfg.Namespace + "/" + cfg.PodName
	}
	return &dnstapTap{w: w, identity: id, version: "meshdns " + cfg.Version}, nil
}

// TapAnswer encodes two or four frames (allocating: only answers the query log
// admits get here) and queues them; a full queue drops them.
func (d *dnstapTap) TapAnswer(a *proxy.TapAnswer) {
	proto := dnstap.UDP
	if a.Protocol == proxy.TCP {
		proto = dnstap.TCP
	}
	m := dnstap.Message{Type: dnstap.ClientQuery, Protocol: proto, QueryAddr: a.Client, ResponseAddr: a.Server,
		QueryTime: a.Received, QueryMessage: a.Query}
	d.w.Send(dnstap.AppendPayload(make([]byte, 0, 96+len(d.identity)+len(a.Query)), d.identity, d.version, &m))
	if f := a.Forwarded; f != nil {
		d.tapForwarded(f)
	}
	m.Type, m.QueryMessage, m.ResponseTime, m.ResponseMessage = dnstap.ClientResponse, nil, a.Answered, a.Reply
	d.w.Send(dnstap.AppendPayload(make([]byte, 0, 96+len(d.identity)+len(a.Reply)), d.identity, d.version, &m))
}

// forwarderProtocols maps an upstream transport to dnstap's socket
// protocol.
var forwarderProtocols = [...]dnstap.Protocol{upstream.TransportUDP: dnstap.UDP, upstream.TransportTCP: dnstap.TCP,
	upstream.TransportDoT: dnstap.DOT}

// tapForwarded queues the FORWARDER_QUERY and FORWARDER_RESPONSE of f.
func (d *dnstapTap) tapForwarded(f *upstream.Forwarded) {
	var proto dnstap.Protocol
	if int(f.Transport) < len(forwarderProtocols) {
		proto = forwarderProtocols[f.Transport]
	}
	m := dnstap.Message{Type: dnstap.ForwarderQuery, Protocol: proto, QueryAddr: f.Local, ResponseAddr: f.Upstream,
		QueryTime: f.Sent, QueryMessage: f.Query}
	d.w.Send(dnstap.AppendPayload(make([]byte, 0, 96+len(d.identity)+len(f.Query)), d.identity, d.version, &m))
	m.Type, m.QueryMessage, m.ResponseTime, m.ResponseMessage = dnstap.ForwarderResponse, nil, f.Received, f.Reply
	d.w.Send(dnstap.AppendPayload(make([]byte, 0, 96+len(d.identity)+len(f.Reply)), d.identity, d.version, &m))
}

// dnstapCollector exports a Writer's counters (registered only with
// --dnstap).
type dnstapCollector struct{ w *dnstap.Writer }

var dnstapDescs = []meshmetrics.Desc{
	{Name: "meshdns_agent_dnstap_frames_sent_total", Help: "dnstap frames written to the collector.", Type: meshmetrics.CounterType},
	{Name: "meshdns_agent_dnstap_frames_dropped_total", Help: "dnstap frames dropped, by reason: queue_full (the collector slow or gone), write_error (lost in a failed write).", Type: meshmetrics.CounterType},
	{Name: "meshdns_agent_dnstap_connected", Help: "1 while a dnstap collector is connected.", Type: meshmetrics.GaugeType},
	{Name: "meshdns_agent_dnstap_connects_total", Help: "Connections to the dnstap collector, by result (ok: handshake done, error).", Type: meshmetrics.CounterType},
}

func (c dnstapCollector) Describe() []meshmetrics.Desc { return dnstapDescs }

func (c dnstapCollector) Collect(w *meshmetrics.Writer) {
	s := c.w.Stats()
	connected := 0.0
	if s.Connected {
		connected = 1
	}
	reason, result := []string{"reason"}, []string{"result"}
	w.Sample(dnstapDescs[0].Name, "", nil, nil, float64(s.Sent))
	w.Sample(dnstapDescs[1].Name, "", reason, []string{"queue_full"}, float64(s.QueueFull))
	w.Sample(dnstapDescs[1].Name, "", reason, []string{"write_error"}, float64(s.WriteFailed))
	w.Sample(dnstapDescs[2].Name, "", nil, nil, connected)
	w.Sample(dnstapDescs[3].Name, "", result, []string{"ok"}, float64(s.Connects))
	w.Sample(dnstapDescs[3].Name, "", result, []string{"error"}, float64(s.ConnectErrors))
}

func registerDnstap(reg *meshmetrics.Registry, w *dnstap.Writer) error {
	if err := reg.Register(dnstapCollector{w}); err != nil {
		return fmt.Errorf("register dnstap metrics: %w", err)
	}
	return nil
}
