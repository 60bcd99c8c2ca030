package server

// Queue takes the agent of namespace/pod for a sender, as a wake does
// before it queues the agent for the fan-out, and returns what a fan-out
// worker does once it reaches the agent: a test runs it when it likes,
// as a queue the workers are slow to drain would. ok is false while the
// agent is taken already (or not connected); wakes pass it by until the
// returned send ran.
func (s *Server) Queue(namespace, pod string) (send func(), ok bool) {
	s.mu.Lock()
	var found *agent
	for a := range s.agents {
		if a.namespace == namespace && a.pod == pod {
			found = a
		}
	}
	s.mu.Unlock()
	if found == nil {
		return nil, false
	}
	found.mu.Lock()
	defer found.mu.Unlock()
	if found.scheduled || found.ended {
		return nil, false
	}
	found.scheduled = true
	return func() { s.send(found) }, true
}
