package server

import (
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A pod-bound token proves a pod (its name and UID); the stream it opened
// speaks for that pod only while the pod exists. When the control plane
// learns that the pod was deleted (Config.Pods), the stream ends with
// errPodDeleted; when the credential expires, with errExpired (stream.go).
// The agent reconnects with the credential it holds then, which the API
// server refuses for a deleted pod.

var (
	errPodDeleted = status.Error(codes.Unauthenticated, "the pod the credential is bound to was deleted; reconnect with a current credential")
	errExpired    = status.Error(codes.Unauthenticated, "the credential expired; reconnect with a fresh one")
)

// Pods is what the server needs to know of pods: which were deleted.
// *podmeta.Pods implements it.
type Pods interface {
	// OnDelete registers f, called with the namespace, name and UID of
	// each pod deleted, or replaced by a pod of the same name and another
	// UID. Calls come one at a time; f is quick and does not call the
	// Pods.
	OnDelete(f func(namespace, name, uid string))
}

const (
	// goneTTL is how long a deleted pod's UID is remembered: longer than
	// a token's verdict is cached (auth.TokenReviewConfig.CacheTTL, 10s,
	// and the API server's own 10s), so a token accepted from a cache
	// after its pod was deleted opens no stream.
	goneTTL = 2 * time.Minute
	// maxGone bounds the UIDs remembered; beyond it the oldest go.
	maxGone = 100_000
)

// podsGone files the streams of pod-bound tokens by their pod, and
// remembers the UIDs of pods deleted lately.
type podsGone struct {
	now func() time.Time

	mu    sync.Mutex                     // guards following; taken last (a gate's mu may be held)
	byPod map[string]map[*agent]struct{} // "namespace/name" -> streams of tokens bound to it
	uids  map[string]time.Time           // UIDs of deleted pods -> when seen deleted
	order []string                       // uids, oldest first
}

func newPodsGone(now func() time.Time) *podsGone {
	return &podsGone{now: now, byPod: map[string]map[*agent]struct{}{}, uids: map[string]time.Time{}}
}

// track files a's stream under its pod, when its credential proves one,
// and reports whether that pod was seen deleted (or replaced) lately. A
// deletion told after the look finds the stream filed, so none is missed.
// The pod cache's current UID of the name is not asked: a cache that
// lags would take a new pod's agent for an old one's, while the UIDs
// told deleted are certain.
func (s *Server) track(a *agent) (gone bool) {
	g := s.gone
	if g == nil || !a.id.PodProven() || a.id.PodUID == "" {
		return false
	}
	key := a.id.Namespace + "/" + a.id.Pod
	g.mu.Lock()
	if g.byPod[key] == nil {
		g.byPod[key] = map[*agent]struct{}{}
	}
	g.byPod[key][a] = struct{}{}
	_, deleted := g.uids[a.id.PodUID]
	g.mu.Unlock()
	return deleted
}

// untrack forgets a's stream.
func (s *Server) untrack(a *agent) {
	g := s.gone
	if g == nil || !a.id.PodProven() {
		return
	}
	key := a.id.Namespace + "/" + a.id.Pod
	g.mu.Lock()
	defer g.mu.Unlock()
	if m := g.byPod[key]; m != nil {
		delete(m, a)
		if len(m) == 0 {
			delete(g.byPod, key)
		}
	}
}

// seenDeleted reports whether a's pod (its UID) was seen deleted lately.
func (s *Server) seenDeleted(a *agent) bool {
	g := s.gone
	if g == nil || !a.id.PodProven() || a.id.PodUID == "" {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	_, ok := g.uids[a.id.PodUID]
	return ok
}

// podDeleted ends the streams of the tokens bound to pod namespace/name
// of UID uid (Pods.OnDelete).
//
// A canary whose stream ended before the deletion was seen (its agent
// stopped on SIGTERM first) gives its slot up now: the pod left, it did
// not crash.
func (s *Server) podDeleted(namespace, name, uid string) {
	for _, a := range s.gone.deleted(namespace+"/"+name, uid) {
		a.logger(s.log).Info("agent's pod deleted: ending its stream", "uid", uid)
		s.stop(a, errPodDeleted)
	}
	for _, g := range s.roll.podGone(namespace, name) {
		s.wakeGate(g)
	}
}

// deleted remembers uid as deleted and returns the streams of pod key
// bound to it.
func (g *podsGone) deleted(key, uid string) []*agent {
	now := g.now()
	g.mu.Lock()
	defer g.mu.Unlock()
	for len(g.order) > 0 && (len(g.order) >= maxGone || now.Sub(g.uids[g.order[0]]) > goneTTL) {
		delete(g.uids, g.order[0])
		g.order = g.order[1:]
	}
	if _, ok := g.uids[uid]; !ok {
		g.order = append(g.order, uid)
	}
	g.uids[uid] = now
	var out []*agent
	for a := range g.byPod[key] {
		if a.id.PodUID == uid {
			out = append(out, a)
		}
	}
	return out
}
