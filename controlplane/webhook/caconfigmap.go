package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	"github.com/meshdns/meshdns/controlplane/internal/metawatch"
	"github.com/meshdns/meshdns/internal/kuberest"
)

// CAConfigMapName is the ConfigMap, in every namespace the install may
// inject into, whose key ca.crt holds the control plane's CA bundle. The
// agent's identity volume projects it: the kubelet refreshes a projected
// ConfigMap in a running pod (an annotation, read through the downward
// API, is fixed at admission), and the agent re-reads its CA file for
// every connection, so a CA rotation reaches running agents with no
// restart.
const CAConfigMapName = "meshdns-ca"

// DefaultCAExcludedNamespaces are the namespaces the webhook configuration
// never sends pods from, whatever their labels.
var DefaultCAExcludedNamespaces = []string{"kube-system", "kube-public", "kube-node-lease", "meshdns-system"}

// CAConfigMapsConfig configures a CAConfigMaps.
type CAConfigMapsConfig struct {
	// Config reaches the API server; required.
	Config *rest.Config
	// Bundle returns the current CA bundle (PEM), or nil before there is
	// one; required.
	Bundle func() []byte
	// Excluded are namespaces never written to; nil means
	// DefaultCAExcludedNamespaces. Namespaces labelled
	// meshdns.io/inject=disabled are never written to either.
	Excluded []string
	// Logger; nil discards.
	Logger *slog.Logger
}

// CAConfigMaps keeps the CAConfigMapName ConfigMap of every namespace the
// install may inject into equal to the bundle, from a watch of those
// namespaces (Run): a namespace gets it when it appears, every one is
// rewritten when the bundle changes. Admission only asks (Has): a review,
// whoever sends it, changes nothing in the cluster, and the API calls are
// as many as there are namespaces, not reviews.
type CAConfigMaps struct {
	core     restClient
	meta     metadata.Interface
	bundle   func() []byte
	excluded []string
	log      *slog.Logger

	mu       sync.Mutex          // guards following
	selected map[string]bool     // namespaces the watch reports
	written  map[string][]byte   // namespace -> bundle its ConfigMap is known to hold
	pending  map[string]struct{} // namespaces to write
	wake     chan struct{}       // signalled when pending grows
}

// restClient is the part of rest.Interface the keeper uses.
type restClient interface {
	Get() *rest.Request
	Post() *rest.Request
	Put() *rest.Request
}

// NewCAConfigMaps returns the keeper. It does no I/O; Run starts the
// watch.
func NewCAConfigMaps(cfg CAConfigMapsConfig) (*CAConfigMaps, error) {
	if cfg.Config == nil || cfg.Bundle == nil {
		return nil, errors.New("ca configmaps: Config and Bundle are required")
	}
	c, err := kuberest.New(cfg.Config, corev1.AddToScheme)
	if err != nil {
		return nil, err
	}
	core, err := c.For(corev1.SchemeGroupVersion)
	if err != nil {
		return nil, err
	}
	meta, err := metadata.NewForConfig(cfg.Config)
	if err != nil {
		return nil, fmt.Errorf("ca configmaps: metadata client: %w", err)
	}
	if cfg.Excluded == nil {
		cfg.Excluded = DefaultCAExcludedNamespaces
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &CAConfigMaps{core: core, meta: meta, bundle: cfg.Bundle, excluded: slices.Clone(cfg.Excluded), log: cfg.Logger,
		selected: map[string]bool{}, written: map[string][]byte{}, pending: map[string]struct{}{}, wake: make(chan struct{}, 1)}, nil
}

// Has reports whether namespace's ConfigMap is known to exist, so a pod
// can project it: made by the keeper (or found) with bundle or an earlier
// one, which the keeper is then rewriting. It reads memory only.
func (k *CAConfigMaps) Has(namespace string, bundle []byte) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.written[namespace]) > 0 && len(bundle) > 0
}

var namespacesResource = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}

// Run watches the namespaces (metadata only, those not labelled
// meshdns.io/inject=disabled) and writes their ConfigMaps, rewrites them
// all when the bundle changes (looked at every interval) and every resync
// (a ConfigMap deleted or edited by hand), until ctx ends. A failed write
// is retried at the next interval.
func (k *CAConfigMaps) Run(ctx context.Context, interval, resync time.Duration) error {
	lw := metawatch.ListWatch(ctx, k.meta, namespacesResource, "", LabelInject+"!=disabled")
	var wg sync.WaitGroup
	wg.Go(func() {
		_ = metawatch.Watch{ListWatch: lw, On: k.onNamespace}.Run(ctx)
	})
	defer wg.Wait()
	var synced []byte
	var last time.Time
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if b := k.bundle(); len(b) > 0 && (!bytes.Equal(b, synced) || time.Since(last) >= resync) {
			synced, last = b, time.Now()
			k.queueAll()
		}
		if err := k.drain(ctx); err != nil {
			k.log.Error("CA bundle configmaps", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-k.wake:
		}
	}
}

// onNamespace follows the watch: a namespace that appears is queued.
func (k *CAConfigMaps) onNamespace(m *metav1.PartialObjectMetadata, gone bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if gone || slices.Contains(k.excluded, m.Name) {
		delete(k.selected, m.Name)
		delete(k.written, m.Name)
		delete(k.pending, m.Name)
		return
	}
	if k.selected[m.Name] {
		return
	}
	k.selected[m.Name] = true
	k.pending[m.Name] = struct{}{}
	select {
	case k.wake <- struct{}{}:
	default:
	}
}

// queueAll queues every selected namespace.
func (k *CAConfigMaps) queueAll() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for ns := range k.selected {
		k.pending[ns] = struct{}{}
	}
}

// drain writes the ConfigMap of every queued namespace; a failed one
// stays queued.
func (k *CAConfigMaps) drain(ctx context.Context) error {
	bundle := k.bundle()
	if len(bundle) == 0 {
		return nil
	}
	k.mu.Lock()
	todo := make([]string, 0, len(k.pending))
	for ns := range k.pending {
		if !bytes.Equal(k.written[ns], bundle) {
			todo = append(todo, ns)
		}
		delete(k.pending, ns)
	}
	k.mu.Unlock()
	slices.Sort(todo)
	var errs []error
	for _, ns := range todo {
		if ctx.Err() != nil {
			return nil
		}
		if err := k.write(ctx, ns, bundle); err != nil {
			errs = append(errs, err)
			k.mu.Lock()
			if k.selected[ns] {
				k.pending[ns] = struct{}{}
			}
			k.mu.Unlock()
		}
	}
	return errors.Join(errs...)
}

// Sync writes the ConfigMap of every namespace the watch has reported,
// now: what Run does after a bundle change.
func (k *CAConfigMaps) Sync(ctx context.Context) error {
	k.queueAll()
	return k.drain(ctx)
}

// write sets namespace's ConfigMap to bundle, creating it when missing.
func (k *CAConfigMaps) write(ctx context.Context, namespace string, bundle []byte) error {
	for attempt := 0; attempt < 3; attempt++ {
		cm := &corev1.ConfigMap{}
		err := k.core.Get().Namespace(namespace).Resource("configmaps").Name(CAConfigMapName).Do(ctx).Into(cm)
		switch {
		case apierrors.IsNotFound(err):
			cm = &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: CAConfigMapName, Namespace: namespace,
					Labels: map[string]string{"app.kubernetes.io/part-of": "meshdns"}},
				Data: map[string]string{caFile: string(bundle)},
			}
			err = k.core.Post().Namespace(namespace).Resource("configmaps").Body(cm).Do(ctx).Error()
			if apierrors.IsAlreadyExists(err) {
				continue // another replica was first: check its content
			}
		case err != nil:
		case cm.Data[caFile] == string(bundle):
		default:
			if cm.Data == nil {
				cm.Data = map[string]string{}
			}
			cm.Data[caFile] = string(bundle)
			err = k.core.Put().Namespace(namespace).Resource("configmaps").Name(CAConfigMapName).Body(cm).Do(ctx).Error()
			if apierrors.IsConflict(err) {
				continue
			}
		}
		if err != nil {
			return fmt.Errorf("configmap %s/%s: %w", namespace, CAConfigMapName, err)
		}
		k.mu.Lock()
		if k.selected[namespace] {
			k.written[namespace] = bundle
		}
		k.mu.Unlock()
		return nil
	}
	return fmt.Errorf("configmap %s/%s keeps changing under us", namespace, CAConfigMapName)
}
