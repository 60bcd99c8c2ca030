package policysource

import (
	"context"
	"slices"

	"k8s.io/apimachinery/pkg/labels"
)

// needPods asks the pod label cache for the namespaces where a policy
// selects pods by label (Store.LabelNamespaces), as policies come and go,
// and hands their pods' labels to the Store, until ctx ends.
func (k *Kube) needPods(ctx context.Context) {
	need := k.cfg.Pods.Need(func(ns, name string, l labels.Set) { k.cfg.Store.SetPod(ns, name, l) })
	defer need.Set(nil)
	var had []string
	for {
		want, changed := k.cfg.Store.LabelNamespaces()
		need.Set(want)
		for _, ns := range had {
			if !slices.Contains(want, ns) {
				k.cfg.Store.ForgetPods(ns)
				k.log.Info("pod labels no longer needed", "namespace", ns)
			}
		}
		for _, ns := range want {
			if !slices.Contains(had, ns) {
				k.log.Info("pod labels needed", "namespace", ns)
			}
		}
		had = want
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}
