// Package podmeta is the control plane's one cache of pod labels, for
// the parts that select pods by label (forwarding rules, DNS policies).
// Each part says which namespaces it needs (Need); the cache runs the
// fewest watches that cover them all: one of every namespace when some
// part needs every namespace, else one per needed namespace, started and
// stopped as the needs change. Every watch is metadata-only
// (PartialObjectMetadata: the API server sends no spec or status) and
// keeps of each pod its name, namespace, UID, resource version and
// labels.
package podmeta

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	"github.com/meshdns/meshdns/controlplane/internal/deps"
	"github.com/meshdns/meshdns/controlplane/internal/metawatch"
)

// AllNamespaces in a Need's namespaces means every namespace (as
// metav1.NamespaceAll).
const AllNamespaces = metav1.NamespaceAll

var podsResource = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

// Config configures Pods.
type Config struct {
	// Config reaches the API server (list and watch on pods). Required.
	Config *rest.Config
	// Logger; nil discards.
	Logger *slog.Logger
}

// Pods is the cache. Run runs its watches; Labels reads it. Safe for
// concurrent use.
type Pods struct {
	meta metadata.Interface
	log  *slog.Logger
	wake chan struct{} // capacity 1: a need changed, or a watch listed

	mu sync.RWMutex // guards following
	// byWatch holds the pods of each running watch (keyed by its
	// namespace, AllNamespaces for the cluster-wide one) by
	// "namespace/name". Watches overlap only while one replaces others.
	byWatch map[string]map[string]pod
	synced  map[string]bool // watches whose first list is in
	needs   []*Need
	deletes []func(namespace, name, uid string) // OnDelete's
	allNeed *Need                               // OnDelete's need of every namespace, or nil
}

// pod is what the cache keeps of a pod.
type pod struct {
	uid    string
	labels labels.Set
}

// New returns the cache; it does no I/O.
func New(cfg Config) (*Pods, error) {
	if cfg.Config == nil {
		return nil, errors.New("podmeta: needs a REST config")
	}
	meta, err := metadata.NewForConfig(cfg.Config)
	if err != nil {
		return nil, fmt.Errorf("podmeta: %w", err)
	}
	return &Pods{meta: meta, log: deps.Logger(cfg.Logger), wake: make(chan struct{}, 1),
		byWatch: map[string]map[string]pod{}, synced: map[string]bool{}}, nil
}

// Labels returns the labels of pod namespace/name, and false when the pod
// is not known (yet, or in no needed namespace). The set is shared: do
// not modify it.
func (p *Pods) Labels(namespace, name string) (labels.Set, bool) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	pd, ok := p.getLocked(namespace, name)
	return pd.labels, ok
}

// UID returns the UID of pod namespace/name, and false when the pod is
// not known (yet, or in no watched namespace, or deleted).
func (p *Pods) UID(namespace, name string) (string, bool) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	pd, ok := p.getLocked(namespace, name)
	return pd.uid, ok
}

func (p *Pods) getLocked(namespace, name string) (pod, bool) {
	key := namespace + "/" + name
	if pd, ok := p.byWatch[AllNamespaces][key]; ok {
		return pd, true
	}
	pd, ok := p.byWatch[namespace][key]
	return pd, ok
}

// OnDelete registers f, called with the namespace, name and UID of each
// pod of any namespace deleted, or replaced by a pod of the same name and
// another UID (the watch missed the deletion): the control plane ends the
// streams of the tokens bound to it. It makes Run watch every namespace.
// Calls come one at a time, with the cache locked: f must be quick and
// must not call the Pods. A deletion seen by two watches (while one
// replaces others) is told twice.
func (p *Pods) OnDelete(f func(namespace, name, uid string)) {
	p.mu.Lock()
	p.deletes = append(p.deletes, f)
	first := p.allNeed == nil
	p.mu.Unlock()
	if first {
		n := p.Need(func(string, string, labels.Set) {})
		p.mu.Lock()
		p.allNeed = n
		p.mu.Unlock()
		n.Set([]string{AllNamespaces})
	}
}

// forbiddenDeletions drops OnDelete's need of every namespace when the
// control plane may not list pods cluster-wide (the VM-facing one, whose
// agents are no pods), rather than retry and log forever; a restart picks
// up RBAC granted later. It logs so once.
func (p *Pods) forbiddenDeletions(ctx context.Context) {
	p.mu.RLock()
	n := p.allNeed
	p.mu.RUnlock()
	if n == nil {
		return
	}
	_, err := p.meta.Resource(podsResource).List(ctx, metav1.ListOptions{Limit: 1})
	if !apierrors.IsForbidden(err) {
		return
	}
	p.log.Info("cannot list pods: the streams of pod-bound tokens end when their token expires, not when their pod is deleted "+
		"(grant list and watch on pods)", "err", err)
	n.Set(nil)
}

// Need is what one part needs of the cache.
type Need struct {
	p       *Pods
	changed func(namespace, name string, l labels.Set)

	// Guarded by p.mu.
	namespaces []string
	set        bool          // Set was called
	synced     chan struct{} // closed once the namespaces of a Set are listed
}

// Need registers a part. changed is called for every pod of a namespace
// when the namespace becomes needed (if the cache holds it already), and
// then after each change of a pod's labels there: added, relabelled, or
// deleted (l nil). Calls come one at a time, in the order of the changes,
// with the cache locked: changed must be quick and must not call the
// Pods or its Needs.
func (p *Pods) Need(changed func(namespace, name string, l labels.Set)) *Need {
	n := &Need{p: p, changed: changed, synced: make(chan struct{})}
	p.mu.Lock()
	p.needs = append(p.needs, n)
	p.mu.Unlock()
	return n
}

// Set replaces the namespaces the part needs (AllNamespaces for every
// one); Run starts and stops watches to match.
func (n *Need) Set(namespaces []string) {
	ns := slices.Compact(slices.Sorted(slices.Values(namespaces)))
	p := n.p
	p.mu.Lock()
	before := n.namespaces
	n.namespaces, n.set = ns, true
	// The pods the cache holds already, of the namespaces needed now and
	// not before, would otherwise never be told.
	was := &Need{namespaces: before}
	for _, pods := range p.byWatch {
		for key, pd := range pods {
			pns, name, _ := strings.Cut(key, "/")
			if n.coversLocked(pns) && !was.coversLocked(pns) {
				n.changed(pns, name, pd.labels)
			}
		}
	}
	p.checkSyncedLocked()
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Synced is closed once the namespaces of the first Set (or of a later
// one, whichever is first) are listed.
func (n *Need) Synced() <-chan struct{} { return n.synced }

// coversLocked reports whether the need includes namespace ns.
func (n *Need) coversLocked(ns string) bool {
	return slices.Contains(n.namespaces, AllNamespaces) || slices.Contains(n.namespaces, ns)
}

// checkSyncedLocked closes the Synced channel of every need whose
// namespaces are all listed.
func (p *Pods) checkSyncedLocked() {
	for _, n := range p.needs {
		select {
		case <-n.synced:
			continue
		default:
		}
		if n.set && !slices.ContainsFunc(n.namespaces, func(ns string) bool { return !p.synced[AllNamespaces] && !p.synced[ns] }) {
			close(n.synced)
		}
	}
}

// wantedLocked returns the watches the needs call for: AllNamespaces
// alone when one need wants every namespace, else each needed namespace.
func (p *Pods) wantedLocked() []string {
	var out []string
	for _, n := range p.needs {
		out = append(out, n.namespaces...)
	}
	if slices.Contains(out, AllNamespaces) {
		return []string{AllNamespaces}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Run runs the watches the needs call for until ctx ends; it returns nil
// then.
func (p *Pods) Run(ctx context.Context) error {
	p.forbiddenDeletions(ctx)
	type running struct {
		cancel context.CancelFunc
		done   chan struct{}
	}
	watches := map[string]running{}
	stop := func(ns string) {
		w := watches[ns]
		w.cancel()
		<-w.done
		delete(watches, ns)
		p.mu.Lock()
		delete(p.byWatch, ns)
		delete(p.synced, ns)
		p.mu.Unlock()
		p.log.Info("pod label watch stopped", "namespace", nsName(ns))
	}
	defer func() {
		for ns := range watches {
			stop(ns)
		}
	}()
	for {
		p.mu.RLock()
		want := p.wantedLocked()
		p.mu.RUnlock()
		for _, ns := range want {
			if _, ok := watches[ns]; ok {
				continue
			}
			wctx, cancel := context.WithCancel(ctx)
			w := running{cancel: cancel, done: make(chan struct{})}
			watches[ns] = w
			p.mu.Lock()
			p.byWatch[ns] = map[string]pod{}
			p.mu.Unlock()
			go func() {
				defer close(w.done)
				if err := p.watch(wctx, ns); err != nil {
					p.log.Error("pod label watch", "namespace", nsName(ns), "err", err)
				}
			}()
			p.log.Info("pod label watch started", "namespace", nsName(ns))
		}
		// Stop the watches no longer wanted once the wanted ones are
		// listed, so a pod's labels stay known while one cluster-wide
		// watch replaces per-namespace ones, or the other way round.
		p.mu.RLock()
		listed := !slices.ContainsFunc(want, func(ns string) bool { return !p.synced[ns] })
		p.mu.RUnlock()
		for _, ns := range slices.Sorted(maps.Keys(watches)) {
			if listed && !slices.Contains(want, ns) {
				stop(ns)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-p.wake:
		}
	}
}

// watch keeps byWatch[ns] the labels of the pods of ns until ctx ends.
func (p *Pods) watch(ctx context.Context, ns string) error {
	return metawatch.Watch{
		ListWatch: metawatch.ListWatch(ctx, p.meta, podsResource, ns, ""),
		Keep:      metawatch.AllLabels,
		On: func(m *metav1.PartialObjectMetadata, gone bool) {
			p.set(ns, m, gone)
		},
		Synced: func() {
			p.mu.Lock()
			if p.byWatch[ns] != nil { // not stopped meanwhile
				p.synced[ns] = true
				p.checkSyncedLocked()
			}
			p.mu.Unlock()
			select {
			case p.wake <- struct{}{}: // Run may stop watches this one replaces
			default:
			}
		},
	}.Run(ctx)
}

// set records the labels of pod m seen by watch ns and tells the needs
// that cover its namespace when they changed.
func (p *Pods) set(ns string, m *metav1.PartialObjectMetadata, gone bool) {
	key := m.Namespace + "/" + m.Name
	var l labels.Set
	if !gone {
		l = labels.Set(m.Labels)
		if l == nil {
			l = labels.Set{} // known, without labels
		}
	}
	p.mu.Lock()
	pods := p.byWatch[ns]
	if pods == nil { // the watch was stopped
		p.mu.Unlock()
		return
	}
	old, had := pods[key]
	uid := string(m.UID)
	if gone {
		delete(pods, key)
	} else {
		pods[key] = pod{uid: uid, labels: l}
	}
	if moved := had && gone || !gone && (!had || !maps.Equal(old.labels, l)); moved {
		for _, n := range p.needs {
			if n.coversLocked(m.Namespace) {
				n.changed(m.Namespace, m.Name, l)
			}
		}
	}
	ended := ""
	switch {
	case gone && uid != "":
		ended = uid
	case gone:
		ended = old.uid
	case had && old.uid != uid:
		ended = old.uid // replaced: the deletion of the old one was missed
	}
	if ended != "" {
		for _, f := range p.deletes {
			f(m.Namespace, m.Name, ended)
		}
	}
	p.mu.Unlock()
}

func nsName(ns string) string {
	if ns == AllNamespaces {
		return "(all)"
	}
	return ns
}
