package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/meshdns/meshdns/internal/kuberest"
)

// CAConfigMapName is the ConfigMap, in every namespace the webhook injects
// into, whose key ca.crt holds the control plane's CA bundle. The agent's
// identity volume projects it: the kubelet refreshes a projected ConfigMap
// in a running pod (an annotation, read through the downward API, is fixed
// at admission), and the agent re-reads its CA file for every connection,
// so a CA rotation reaches running agents with no restart.
const CAConfigMapName = "meshdns-ca"

// CAConfigMaps keeps the CAConfigMapName ConfigMap of each namespace equal
// to the bundle: created at admission (Ensure), rewritten when the bundle
// changes (Run).
type CAConfigMaps struct {
	core   *rest.RESTClient
	bundle func() []byte
	log    *slog.Logger

	mu      sync.Mutex
	written map[string][]byte // namespace -> bundle its ConfigMap holds
}

// NewCAConfigMaps returns the keeper for a REST configuration and the
// bundle's source. Its REST client's scheme knows only the core types it
// touches (internal/kuberest).
func NewCAConfigMaps(cfg *rest.Config, bundle func() []byte, log *slog.Logger) (*CAConfigMaps, error) {
	c, err := kuberest.New(cfg, corev1.AddToScheme)
	if err != nil {
		return nil, err
	}
	core, err := c.For(corev1.SchemeGroupVersion)
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &CAConfigMaps{core: core, bundle: bundle, log: log, written: map[string][]byte{}}, nil
}

// Ensure makes namespace's ConfigMap hold the current bundle, creating it
// when missing. A namespace already written with this bundle costs no
// API call, so admission pays once per namespace and bundle.
func (k *CAConfigMaps) Ensure(ctx context.Context, namespace string) error {
	bundle := k.bundle()
	if len(bundle) == 0 {
		return errors.New("no CA bundle yet")
	}
	k.mu.Lock()
	done := bytes.Equal(k.written[namespace], bundle)
	k.mu.Unlock()
	if done {
		return nil
	}
	return k.write(ctx, namespace, bundle, true)
}

// write sets namespace's ConfigMap to bundle; create says whether a
// missing one is created (at admission) or left missing (a resync of a
// namespace nothing was injected into).
func (k *CAConfigMaps) write(ctx context.Context, namespace string, bundle []byte, create bool) error {
	for attempt := 0; attempt < 3; attempt++ {
		cm := &corev1.ConfigMap{}
		err := k.core.Get().Namespace(namespace).Resource("configmaps").Name(CAConfigMapName).Do(ctx).Into(cm)
		switch {
		case apierrors.IsNotFound(err) && !create:
			k.forget(namespace)
			return nil
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
		k.written[namespace] = bundle
		k.mu.Unlock()
		return nil
	}
	return fmt.Errorf("configmap %s/%s keeps changing under us", namespace, CAConfigMapName)
}

func (k *CAConfigMaps) forget(namespace string) {
	k.mu.Lock()
	delete(k.written, namespace)
	k.mu.Unlock()
}

// Sync rewrites the ConfigMap of every namespace that has one. It lists
// namespaces and gets the ConfigMap by name in each, so the control plane
// needs no right to list (and read) every ConfigMap in the cluster.
func (k *CAConfigMaps) Sync(ctx context.Context) error {
	bundle := k.bundle()
	if len(bundle) == 0 {
		return nil
	}
	var nss corev1.NamespaceList
	if err := k.core.Get().Resource("namespaces").Do(ctx).Into(&nss); err != nil {
		return fmt.Errorf("list namespaces: %w", err)
	}
	var errs []error
	for _, ns := range nss.Items {
		if err := k.write(ctx, ns.Name, bundle, false); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Run syncs at once, then whenever the bundle changes (looked at every
// interval) and every resync (a ConfigMap deleted or edited by hand), until
// ctx ends; a failed sync is retried at the next interval.
func (k *CAConfigMaps) Run(ctx context.Context, interval, resync time.Duration) error {
	var synced []byte
	var last time.Time
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if b := k.bundle(); len(b) > 0 && (!bytes.Equal(b, synced) || time.Since(last) >= resync) {
			if err := k.Sync(ctx); err != nil {
				k.log.Error("CA bundle configmaps", "err", err)
			} else {
				synced, last = b, time.Now()
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
