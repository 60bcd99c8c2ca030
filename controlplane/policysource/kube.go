package policysource

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/meshdns/meshdns/controlplane/internal/deps"
	"github.com/meshdns/meshdns/controlplane/podmeta"
	"github.com/meshdns/meshdns/controlplane/registry"
)

// Resource is the DNSPolicy resource the CRD serves.
var Resource = schema.GroupVersionResource{Group: "meshdns.io", Version: "v1alpha1", Resource: "dnspolicies"}

// KubeConfig configures a Kube source.
type KubeConfig struct {
	// Config reaches the API server. Required.
	Config *rest.Config
	// Store receives the valid policies and the pod labels. Required.
	Store *Store
	// Name is the source name given to the registry; zero means
	// "dnspolicies".
	Name string
	// Pods is the control plane's shared pod label cache, run by its
	// owner; Kube asks it for the namespaces where a policy selects pods
	// by label. Nil: Kube makes its own from Config and runs it.
	Pods *podmeta.Pods
	// NoPodLabels turns the pod labels off: pods are judged with no
	// labels (a control plane whose agents are VMs, not pods).
	NoPodLabels bool
	// NoStatus leaves the objects' status alone (a second control plane
	// beside one that writes it, without the RBAC to write), and records
	// no events either: they go with the status write.
	NoStatus bool
	// Instance names this process in the events it records (events/v1
	// reportingInstance); zero means the host name.
	Instance string
	// Logger; nil discards.
	Logger *slog.Logger
	// Now stamps status conditions; nil means time.Now.
	Now func() time.Time
}

// Kube watches DNSPolicy objects in every namespace, writes each one's
// Accepted status condition, and keeps the Store's "kubernetes" policies
// the valid ones. It also has the labels of the pods of the namespaces
// where a policy selects pods by label given to the Store (KubeConfig.Pods).
//
// It is a registry.Source that sends one empty snapshot once the first
// list is in the Store, so the control plane serves no agent a version
// before it knows which policies apply (a version without a policy would
// lift the one the agent restored from its state dir).
type Kube struct {
	cfg      KubeConfig
	log      *slog.Logger
	dyn      dynamic.Interface
	ownPods  bool   // cfg.Pods was made here and Run runs it
	instance string // the events' reportingInstance, set by Run

	mu    sync.Mutex          // guards following
	dirty map[string]struct{} // object keys (ns/name) to look at
	kick  chan struct{}       // capacity 1: dirty is not empty

	// seen holds the validation of each object by key, at the resource
	// version and generation it was done for. Only the handling goroutine
	// uses it.
	seen map[string]checked
	// refused holds the valid objects the Store refused for their
	// namespace's rule budget, by key, as last handled; handling
	// goroutine only.
	refused map[string]error
}

type checked struct {
	resourceVersion string
	err             error
	// policy is what the store gets: the object when valid, else its
	// last valid generation seen by this process (served is false when
	// there is none).
	policy Policy
	served bool
}

var _ registry.Source = (*Kube)(nil)

// Origin is the Store origin of the policies from the API server.
const Origin = "kubernetes"

// NewKube returns a source; Run starts the watches. It does no I/O.
func NewKube(cfg KubeConfig) (*Kube, error) {
	if cfg.Config == nil || cfg.Store == nil {
		return nil, errors.New("policysource: kube source needs a REST config and a store")
	}
	if cfg.Name == "" {
		cfg.Name = "dnspolicies"
	}
	cfg.Now = deps.Now(cfg.Now)
	dyn, err := dynamic.NewForConfig(cfg.Config)
	if err != nil {
		return nil, fmt.Errorf("policysource: %w", err)
	}
	log := deps.Logger(cfg.Logger).With("source", cfg.Name)
	own := cfg.Pods == nil && !cfg.NoPodLabels
	if own {
		if cfg.Pods, err = podmeta.New(podmeta.Config{Config: cfg.Config, Logger: log}); err != nil {
			return nil, fmt.Errorf("policysource: %w", err)
		}
	}
	return &Kube{cfg: cfg, log: log, dyn: dyn, ownPods: own,
		dirty: map[string]struct{}{}, kick: make(chan struct{}, 1), seen: map[string]checked{}}, nil
}

// Name is the source name passed to the registry.
func (k *Kube) Name() string { return k.cfg.Name }

// Run watches until ctx ends; it returns nil then.
func (k *Kube) Run(ctx context.Context, sink registry.Sink) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	k.instance = instanceName(k.cfg.Instance)

	inf := cache.NewSharedIndexInformer(k.listWatch(ctx), &unstructured.Unstructured{}, 0, cache.Indexers{})
	enqueue := func(obj any) {
		key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
		if err != nil {
			return
		}
		k.mu.Lock()
		k.dirty[key] = struct{}{}
		k.mu.Unlock()
		select {
		case k.kick <- struct{}{}:
		default:
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, UpdateFunc: func(_, obj any) { enqueue(obj) }, DeleteFunc: enqueue,
	}); err != nil {
		return fmt.Errorf("policysource: %w", err)
	}
	wg.Go(func() { inf.Run(ctx.Done()) })
	if !k.cfg.NoPodLabels {
		wg.Go(func() { k.needPods(ctx) })
		if k.ownPods {
			wg.Go(func() {
				if err := k.cfg.Pods.Run(ctx); err != nil {
					k.log.Error("pod labels", "err", err)
				}
			})
		}
	}
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return nil
	}
	// The budget of a namespace is shared with the other origins: a
	// change there may refuse or admit an object here, whose status
	// then changes. Taken before each handle, so none is missed.
	budget := k.cfg.Store.BudgetChanged()
	k.handle(ctx, inf.GetIndexer())
	sink.Update(k.cfg.Name, registry.Snapshot{})
	k.log.Info("DNSPolicy objects synced", "valid", len(k.valid()))

	// A status write that failed is tried again after a pause (the
	// object's next event would also bring it back).
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-k.kick:
		case <-retry.C:
		case <-budget:
		}
		budget = k.cfg.Store.BudgetChanged()
		if failed := k.handle(ctx, inf.GetIndexer()); len(failed) > 0 {
			k.mu.Lock()
			for _, key := range failed {
				k.dirty[key] = struct{}{}
			}
			k.mu.Unlock()
			retry.Reset(2 * time.Second)
		}
	}
}

// listWatch lists and watches DNSPolicy objects. A cluster without the
// CRD lists as empty, so the control plane serves without policies (the
// reflector keeps trying the watch, and lists again, with backoff, so a
// CRD installed later is picked up).
func (k *Kube) listWatch(ctx context.Context) *cache.ListWatch {
	ri := k.dyn.Resource(Resource)
	return &cache.ListWatch{
		ListFunc: func(o metav1.ListOptions) (runtime.Object, error) {
			l, err := ri.List(ctx, o)
			if apierrors.IsNotFound(err) {
				k.log.Warn("the API server does not serve DNSPolicy objects (CRD not installed?): no policies")
				return &unstructured.UnstructuredList{Object: map[string]any{"apiVersion": "meshdns.io/v1alpha1", "kind": "DNSPolicyList",
					"metadata": map[string]any{"resourceVersion": ""}}}, nil
			}
			if apierrors.IsForbidden(err) {
				k.log.Error("cannot list DNSPolicy objects (RBAC: list and watch dnspolicies.meshdns.io); "+
					"until the first list succeeds no agent is served", "err", err)
			}
			return l, err
		},
		WatchFunc: func(o metav1.ListOptions) (watch.Interface, error) { return ri.Watch(ctx, o) },
	}
}

// handle validates the dirty objects, hands the Store the valid policies,
// and writes the status of the dirty objects and of those the Store's
// rule budget refuses or admits since the last time, where it differs.
// It returns the keys whose status write failed.
func (k *Kube) handle(ctx context.Context, idx cache.Indexer) (failed []string) {
	k.mu.Lock()
	keys := make([]string, 0, len(k.dirty))
	for key := range k.dirty {
		keys = append(keys, key)
	}
	clear(k.dirty)
	k.mu.Unlock()
	slices.Sort(keys)
	for _, key := range keys {
		obj, ok, _ := idx.GetByKey(key)
		if !ok {
			delete(k.seen, key)
			continue
		}
		k.check(key, obj.(*unstructured.Unstructured))
	}
	// The store decides which valid policies its namespaces' rule budget
	// admits; a change there is a status to write for objects that did
	// not change themselves.
	k.cfg.Store.SetPolicies(Origin, k.valid())
	refused := k.cfg.Store.Refused(Origin)
	for key, err := range refused {
		if prev, was := k.refused[key]; !was || prev.Error() != err.Error() {
			keys = append(keys, key)
			k.log.Warn("DNSPolicy not served: its namespace's policies have too many rules", "policy", key, "err", err)
		}
	}
	for key := range k.refused {
		if _, still := refused[key]; !still {
			keys = append(keys, key)
		}
	}
	k.refused = refused
	if k.cfg.NoStatus {
		return nil
	}
	slices.Sort(keys)
	return k.writeStatuses(ctx, idx, slices.Compact(keys))
}

// writeStatuses writes the status of the objects of keys where it
// differs, a refusal by the Store's rule budget as their error. It
// returns the keys whose write failed.
func (k *Kube) writeStatuses(ctx context.Context, idx cache.Indexer, keys []string) (failed []string) {
	for _, key := range keys {
		obj, ok, _ := idx.GetByKey(key)
		c, seen := k.seen[key]
		if !ok || !seen {
			continue
		}
		if err := k.refused[key]; err != nil {
			c.err, c.served = err, false
		}
		u := obj.(*unstructured.Unstructured)
		rejected, err := k.writeStatus(ctx, u, c)
		if rejected {
			k.recordInvalid(ctx, u, c.err)
		}
		if err != nil {
			if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
				k.log.Warn("write DNSPolicy status", "policy", key, "err", err)
			}
			if !apierrors.IsNotFound(err) {
				failed = append(failed, key)
			}
		}
	}
	return failed
}

// check validates the object u of key when its resource version is new,
// keeping its last valid generation served through an invalid edit.
func (k *Kube) check(key string, u *unstructured.Unstructured) {
	c, ok := k.seen[key]
	if ok && c.resourceVersion == u.GetResourceVersion() {
		return
	}
	p, err := FromUnstructured(u)
	next := checked{resourceVersion: u.GetResourceVersion(), policy: p, err: err, served: err == nil}
	if err != nil && c.served {
		// An edit that breaks a policy must not lift it: the last valid
		// generation stays in force until fixed.
		next.policy, next.served = c.policy, true
		k.log.Warn("invalid DNSPolicy edit; its last valid generation stays in force", "policy", key,
			"served_generation", c.policy.Generation, "err", err)
	} else if err != nil {
		k.log.Warn("invalid DNSPolicy, not served", "policy", key, "err", err)
	}
	k.seen[key] = next
}

// valid returns the valid policies, sorted by key.
func (k *Kube) valid() []Policy {
	keys := make([]string, 0, len(k.seen))
	for key, c := range k.seen {
		if c.served {
			keys = append(keys, key)
		}
	}
	slices.Sort(keys)
	out := make([]Policy, len(keys))
	for i, key := range keys {
		out[i] = k.seen[key].policy
	}
	return out
}

// stillServed starts the message of a refusal written by a replica that
// serves an earlier generation.
const stillServed = "is still served; "

// rewordRefusal reports whether a replica should rewrite a refusal already
// written for this generation. Replicas word it differently: one that
// saw the last valid generation says it is still served, one started
// since the break cannot know it. If each rewrote the other's words, the
// status would flip between them for as long as the object stays broken,
// a write per watch round trip. So the first "still served" stands, and
// a plain refusal gives way only to one.
func rewordRefusal(have map[string]any, c checked) bool {
	msg, _ := have["message"].(string)
	return c.served && !strings.Contains(msg, stillServed)
}

// writeStatus sets the object's Accepted condition, observedGeneration
// and rule count, unless they already say so: several replicas compute
// the same status, and only the first write of a change goes through.
// rejected is true when this write is the first to say the object's
// generation is refused: the one time its event is recorded, whichever
// replica (or restart) gets there first.
func (k *Kube) writeStatus(ctx context.Context, u *unstructured.Unstructured, c checked) (rejected bool, err error) {
	want := Condition(u.GetGeneration(), c.err, k.cfg.Now())
	if c.err != nil && c.served {
		want.Message = cutMessage(fmt.Sprintf("generation %d %s%s", c.policy.Generation, stillServed, want.Message))
	}
	rules := int64(len(c.policy.DNS.Rules))
	if !c.served {
		rules = 0
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	i := slices.IndexFunc(conds, func(v any) bool {
		m, ok := v.(map[string]any)
		return ok && m["type"] == ConditionAccepted
	})
	gen, _, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration")
	have, _, _ := unstructured.NestedInt64(u.Object, "status", "rules")
	if i >= 0 {
		m := conds[i].(map[string]any)
		og, _, _ := unstructured.NestedInt64(m, "observedGeneration")
		if m["status"] == string(want.Status) && m["reason"] == want.Reason && m["message"] == want.Message &&
			og == want.ObservedGeneration && gen == u.GetGeneration() && have == rules {
			return false, nil
		}
		if c.err != nil && m["status"] == string(metav1.ConditionFalse) && m["reason"] == want.Reason &&
			og == want.ObservedGeneration && gen == u.GetGeneration() && !rewordRefusal(m, c) {
			return false, nil
		}
		// Refused before at this generation (the message may differ):
		// its event is recorded already.
		rejected = c.err != nil && !(m["status"] == string(metav1.ConditionFalse) && og == want.ObservedGeneration)
		if m["status"] == string(want.Status) {
			if t, ok := m["lastTransitionTime"].(string); ok {
				if pt, err := time.Parse(time.RFC3339, t); err == nil {
					want.LastTransitionTime = metav1.NewTime(pt) // the status did not flip
				}
			}
		}
	} else {
		rejected = c.err != nil
	}
	cond, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&want)
	if err != nil {
		return false, err
	}
	if i >= 0 {
		conds = slices.Clone(conds)
		conds[i] = cond
	} else {
		conds = append(slices.Clone(conds), cond)
	}
	u = u.DeepCopy()
	if err := unstructured.SetNestedSlice(u.Object, conds, "status", "conditions"); err != nil {
		return false, err
	}
	if err := unstructured.SetNestedField(u.Object, u.GetGeneration(), "status", "observedGeneration"); err != nil {
		return false, err
	}
	if err := unstructured.SetNestedField(u.Object, rules, "status", "rules"); err != nil {
		return false, err
	}
	if _, err := k.dyn.Resource(Resource).Namespace(u.GetNamespace()).UpdateStatus(ctx, u, metav1.UpdateOptions{}); err != nil {
		return false, err
	}
	return rejected, nil
}
