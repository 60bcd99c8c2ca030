package policysource

import (
	"context"
	"fmt"
	"os"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// The Warning event recorded on a DNSPolicy whose generation is rejected.
const (
	EventReasonInvalid = "InvalidPolicy"
	eventAction        = "Validate"
	// EventController is the events' reportingController.
	EventController = "meshdns.io/controlplane"
	// maxNote is the events.k8s.io/v1 bound on an event's note.
	maxNote = 1024
)

// eventsResource is written through the dynamic client: the typed events
// client would pull in client-go's scheme of every API group (see
// docs/design.md).
var eventsResource = eventsv1.SchemeGroupVersion.WithResource("events")

// recordInvalid records a Warning event on the object with the validation
// error as its note. The caller records it once per rejected generation
// (when the status it writes first says so), not on every resync. Events
// are best effort: a failure is logged and not retried.
func (k *Kube) recordInvalid(ctx context.Context, u *unstructured.Unstructured, verr error) {
	now := k.cfg.Now()
	ev := &eventsv1.Event{
		TypeMeta: metav1.TypeMeta{APIVersion: eventsv1.SchemeGroupVersion.String(), Kind: "Event"},
		// Named as client-go's recorders name theirs (generateName may not
		// end in a dot).
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", u.GetName(), now.UnixNano()), Namespace: u.GetNamespace()},
		EventTime:  metav1.NewMicroTime(now),
		Regarding: corev1.ObjectReference{
			APIVersion: u.GetAPIVersion(), Kind: u.GetKind(), Namespace: u.GetNamespace(), Name: u.GetName(),
			UID: u.GetUID(), ResourceVersion: u.GetResourceVersion(),
		},
		ReportingController: EventController,
		ReportingInstance:   k.instance,
		Action:              eventAction,
		Reason:              EventReasonInvalid,
		Type:                corev1.EventTypeWarning,
		Note:                truncate(verr.Error(), maxNote),
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(ev)
	if err == nil {
		_, err = k.dyn.Resource(eventsResource).Namespace(u.GetNamespace()).
			Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{})
	}
	if err != nil {
		k.log.Warn("record DNSPolicy event (RBAC: create events.events.k8s.io)", "policy",
			u.GetNamespace()+"/"+u.GetName(), "err", err)
	}
}

// truncate bounds s to n bytes, cut at a rune boundary and ending in "...".
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n-3]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s + "..."
}

// instanceName is the events' reportingInstance: the configured one, else
// the host name (the pod's name in a cluster).
func instanceName(configured string) string {
	if configured != "" {
		return configured
	}
	if h, err := os.Hostname(); err == nil && h != "" {
		return h
	}
	return "meshdns-controlplane"
}
