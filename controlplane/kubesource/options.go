package kubesource

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"

	"github.com/meshdns/meshdns/controlplane/registry"
)

// Options are the options of CoreDNS's kubernetes plugin that mean
// something for names the control plane sends to per-pod agents, with the
// plugin's semantics (README.md, Configuration). The zero value is the
// plugin's default, except StartupTimeout (see there).
type Options struct {
	// NamespaceLabels exposes only the namespaces matching this label
	// selector (namespace_labels); empty exposes every namespace. It needs
	// a watch on Namespaces (the Client must be a NamespaceClient) and
	// cannot be combined with Config.Namespaces, as in CoreDNS.
	NamespaceLabels string
	// EndpointPodNames names an endpoint without a hostname after the pod
	// its targetRef names, instead of its dashed IP (endpoint_pod_names).
	EndpointPodNames bool
	// IgnoreEmptyService drops a ClusterIP service without a ready
	// endpoint address, so its name is NXDOMAIN and a stub resolver's
	// search walk goes on (ignore empty_service). Headless and
	// ExternalName services are not affected.
	IgnoreEmptyService bool
	// NoEndpoints turns the EndpointSlice watch off: headless services and
	// endpoint names do not exist (noendpoints).
	NoEndpoints bool
	// Fallthrough stops reporting the cluster domain as a zone the source
	// is complete for, so agents forward a name they do not know inside it
	// to their upstream instead of answering NXDOMAIN (fallthrough, for a
	// zone shared with another DNS server).
	Fallthrough bool
	// StartupTimeout bounds the wait for the first sync (startup_timeout):
	// when it passes, the source sends what its caches hold so far without
	// the zone (agents forward the names they do not know, never a false
	// NXDOMAIN) and the zone once synced. Zero waits for the sync however
	// long it takes (CoreDNS's default is 5s).
	StartupTimeout time.Duration
}

// validate checks the options against the rest of cfg.
func (o Options) validate(cfg Config) error {
	if o.NamespaceLabels != "" {
		if _, err := labels.Parse(o.NamespaceLabels); err != nil {
			return fmt.Errorf("kubesource: namespace labels %q: %w", o.NamespaceLabels, err)
		}
		if len(cfg.Namespaces) > 0 {
			return errors.New("kubesource: namespaces and namespace labels cannot both be set")
		}
		if _, ok := cfg.Client.(NamespaceClient); !ok {
			return errors.New("kubesource: namespace labels need a client that watches namespaces")
		}
	}
	if o.StartupTimeout < 0 {
		return fmt.Errorf("kubesource: negative startup timeout %v", o.StartupTimeout)
	}
	return nil
}

// zones are the zones a snapshot reports once the source is in sync.
func (s *Source) zones() []string {
	if s.cfg.Fallthrough {
		return nil
	}
	return []string{s.cfg.ClusterDomain}
}

// hidden reports whether the options drop the service svc (with its
// slices eps) from the table.
func (s *Source) hidden(svc *service, eps []*endpointSlice) bool {
	if !s.namespaceExposed(svc.namespace) {
		return true
	}
	if s.cfg.NoEndpoints && svc.kind == kindHeadless {
		// CoreDNS answers NXDOMAIN for every headless name without its
		// endpoint watch; an entry without endpoints would be NODATA.
		return true
	}
	if s.cfg.IgnoreEmptyService && svc.kind == kindClusterIP {
		for _, sl := range eps {
			for _, ep := range sl.endpoints {
				if ep.ready {
					return false
				}
			}
		}
		return true
	}
	return false
}

// sliceTransform is the EndpointSlice transform: transformEndpointSlice,
// and with EndpointPodNames the pod name as the hostname of endpoints
// without one.
func (s *Source) sliceTransform() cache.TransformFunc {
	if !s.cfg.EndpointPodNames {
		return transformEndpointSlice
	}
	return func(obj any) (any, error) {
		orig, ok := obj.(*discoveryv1.EndpointSlice)
		out, err := transformEndpointSlice(obj)
		if !ok || err != nil {
			return out, err
		}
		podNames(orig, out.(*endpointSlice))
		return out, nil
	}
}

// podNames sets the hostname of each endpoint of small that has none to
// the name of the pod its targetRef names (any kind, as CoreDNS). A name
// that is not one DNS label (longer than 63, or with dots, which a pod
// name may have) keeps the dashed IP: CoreDNS skips the first and would
// answer the second under several labels, which the agent's table
// refuses. Endpoints are matched by their first address, since the
// transform skips endpoints without a usable one.
func podNames(orig *discoveryv1.EndpointSlice, small *endpointSlice) {
	names := map[netip.Addr]string{}
	for _, ep := range orig.Endpoints {
		if ep.Hostname != nil && *ep.Hostname != "" || ep.TargetRef == nil || !isLabel(ep.TargetRef.Name) {
			continue
		}
		for _, raw := range ep.Addresses {
			if a, ok := parseAddr(raw); ok {
				names[a] = ep.TargetRef.Name
				break
			}
		}
	}
	for i := range small.endpoints {
		e := &small.endpoints[i]
		if e.hostname == "" {
			e.hostname = names[e.addrs[0]]
		}
	}
}

func isLabel(s string) bool {
	return s != "" && len(s) < 64 && !strings.Contains(s, ".")
}

// sendPartial hands the sink what the caches hold before they synced,
// without the zone: the StartupTimeout case.
func (s *Source) sendPartial(sink registry.Sink, watches map[string]*informers) {
	entries := newEntrySet()
	for ns, w := range watches {
		for _, key := range w.svc.GetIndexer().ListKeys() {
			s.rebuild(entries, watches, ns, key)
		}
	}
	sink.Update(s.cfg.Name, registry.Snapshot{Entries: entries.snapshot()})
	s.m.snapshots.Inc()
	s.m.entries.Set(float64(entries.len()))
	s.log.Warn("informers not synced within the startup timeout: serving without the zone",
		"timeout", s.cfg.StartupTimeout, "services", entries.len())
}
