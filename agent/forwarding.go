package agent

import (
	"errors"
	"fmt"

	"github.com/meshdns/meshdns/internal/namewire"
	"github.com/meshdns/meshdns/pkg/proxy/upstream"
)

// errForwarding wraps every forwarding rule the agent cannot apply.
var errForwarding = errors.New("invalid forwarding rules")

// convertForwarding checks a version's forwarding rules and compiles them
// for the resolver; nil for none. One bad rule fails them all (and so the
// version): sending part of a workload's stub domains elsewhere would
// leak its private names to the default upstreams.
func convertForwarding(rules []namewire.ForwardRule) (*upstream.Routes, error) {
	if len(rules) == 0 {
		return nil, nil
	}
	routes := make([]upstream.Route, len(rules))
	for i, r := range rules {
		routes[i] = upstream.Route{Domains: r.Domains, Upstreams: r.Upstreams}
	}
	rt, err := upstream.NewRoutes(routes)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errForwarding, err)
	}
	return rt, nil
}
