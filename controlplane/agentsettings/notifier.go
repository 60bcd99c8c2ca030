package agentsettings

import (
	"sync"

	"github.com/meshdns/meshdns/controlplane/auth"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// Notifier implements Changed for a part: Notify closes the channel
// Changed returned and starts the next one. The zero value is ready; safe
// for concurrent use.
type Notifier struct {
	mu sync.Mutex    // guards following
	ch chan struct{} // or nil before the first Changed
}

// Changed returns a channel closed at the next Notify.
func (n *Notifier) Changed() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ch == nil {
		n.ch = make(chan struct{})
	}
	return n.ch
}

// Notify announces a change. Call it after the new state is visible to
// Fill.
func (n *Notifier) Notify() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ch != nil {
		close(n.ch)
		n.ch = nil
	}
}

// Func is a part that never changes, filled by a function (fixed settings,
// tests).
type Func func(id auth.Identity, s *meshdnsv1.AgentSettings)

// Fill calls f.
func (f Func) Fill(id auth.Identity, s *meshdnsv1.AgentSettings) { f(id, s) }

// Changed returns nil: a Func never changes.
func (Func) Changed() <-chan struct{} { return nil }

var _ Part = Func(nil)
