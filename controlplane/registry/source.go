// Package registry is the control plane's one model of all names from all
// sources (files, Kubernetes).
package registry

import (
	"context"
	"time"

	"github.com/meshdns/meshdns/pkg/nametable"
)

// Entry is a name as a source sees it, plus who may see it.
type Entry struct {
	nametable.Entry
	// Namespaces that may see the entry; empty means every namespace.
	Namespaces []string
}

// Snapshot is the complete current state of one source.
type Snapshot struct {
	Entries []Entry
	// Zones the source is complete for (no trailing dot). A source reports
	// a zone only once it is in sync (Kubernetes: informers synced), so
	// agents never answer a false NXDOMAIN.
	Zones []string
	// Changed is when the change that produced this snapshot happened at
	// the source (for Kubernetes, when the API server accepted it); zero
	// if unknown. It feeds the DNS programming latency metric.
	Changed time.Time
}

// Sink receives a source's complete state each time it changes. Update may
// be called from any goroutine. The sink takes ownership of s: the source
// must not modify it afterwards.
type Sink interface {
	Update(source string, s Snapshot)
}

// Source produces snapshots of one kind of names (files, Kubernetes) and
// hands each complete state to sink until ctx ends. Run returns nil when ctx
// ends and an error only when the source cannot continue at all; the control
// plane then stops.
type Source interface {
	Run(ctx context.Context, sink Sink) error
}
