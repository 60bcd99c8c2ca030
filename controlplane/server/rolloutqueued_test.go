package server_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/meshdns/meshdns/controlplane/server"
)

// An agent queued for the fan-out when its stream ends, and reached by a
// worker only after its handler left the rollout, must not take a canary
// slot: nothing would ever give it up, and the view's new versions would
// reach only the other canaries. On grpc-go's streams the fan-out drains
// slowly enough under churn for this to happen within a minute.
func TestRolloutAgentQueuedWhenItsStreamEndsTakesNoSlot(t *testing.T) {
	for _, grpcGo := range []bool{true, false} {
		t.Run(map[bool]string{true: "grpc-go", false: "agentstream"}[grpcGo], func(t *testing.T) {
			h, f, _ := rolloutHarness(t, time.Hour, func(c *server.Config) { c.GRPCAgentStream = grpcGo })
			// Every agent waits in the queue, the last one first; the
			// wakes of the next version pass them by.
			sends := make([]func(), rolloutAgents)
			for i := range sends {
				waitFor(t, fmt.Sprintf("p%d queued", i), func() bool {
					var ok bool
					sends[i], ok = h.srv.Queue("ns", fmt.Sprintf("p%d", i))
					return ok
				})
			}
			last := rolloutAgents - 1
			f.agents[last].Close()
			f.dead = map[int]bool{last: true}
			waitFor(t, "the last agent's stream ended", func() bool { return len(h.srv.Agents()) == last })
			h.publish(t, entry("a.corp.example", "10.0.0.1"), entry("b.corp.example", "10.0.0.2"))
			v2 := h.current(t)
			sends[last]()
			for _, send := range sends[:last] {
				send()
			}
			// The first three live agents are the canaries; their ACKs
			// release v2 to the others.
			f.run(f.holdAll(v2), nil)
			waitFor(t, "no version held", func() bool { return h.metric(t, "meshdns_controlplane_rollout_held_versions") == 0 })
		})
	}
}
