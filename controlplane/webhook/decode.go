package webhook

import (
	"encoding/json"
	"fmt"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// An AdmissionReview is decoded in two steps, so what a review costs is
// bounded by what the decision needs rather than by what the sender put
// in it: first the envelope below (the pod stays raw bytes; the user info,
// options and old object are skipped by the decoder without being built),
// then, once shape says the raw pod is not a memory bomb, the pod itself.

// reviewHead is the part of an admission.k8s.io/v1 AdmissionReview the
// webhook reads.
type reviewHead struct {
	APIVersion string       `json:"apiVersion"`
	Kind       string       `json:"kind"`
	Request    *requestHead `json:"request"`
}

// requestHead is the part of an AdmissionRequest the webhook reads.
type requestHead struct {
	UID         types.UID                   `json:"uid"`
	Resource    metav1.GroupVersionResource `json:"resource"`
	SubResource string                      `json:"subResource"`
	Name        string                      `json:"name"`
	Namespace   string                      `json:"namespace"`
	Operation   admissionv1.Operation       `json:"operation"`
	Object      json.RawMessage             `json:"object"`
}

// Bounds on the raw pod before it is decoded into a corev1.Pod. A JSON
// object can become a 384-byte corev1.Container (an empty "{}" is three
// bytes of input: 130 times its size), and a member of an array or a map a
// string header or a map entry; together they bound a decoded pod to a
// few MiB whatever the body holds. No pod anyone runs comes near them: a
// pod of 20 containers with 100 environment variables each has about
// 2,500 objects.
const (
	maxPodObjects = 10_000
	maxPodMembers = 100_000
)

// podShape counts the objects ('{') and the members after the first of
// each array or object (',') of raw JSON, outside strings. It allocates
// nothing and reads each byte once.
func podShape(raw []byte) (objects, members int) {
	inString, escaped := false, false
	for _, c := range raw {
		switch {
		case escaped:
			escaped = false
		case inString:
			switch c {
			case '\\':
				escaped = true
			case '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{':
			objects++
		case c == ',':
			members++
		}
	}
	return objects, members
}

// errPodTooLarge says a pod is past maxPodObjects or maxPodMembers.
type errPodTooLarge struct{ objects, members int }

func (e errPodTooLarge) Error() string {
	return fmt.Sprintf("pod too large to inspect: %d JSON objects and %d members, limits %d and %d",
		e.objects, e.members, maxPodObjects, maxPodMembers)
}

// checkShape returns errPodTooLarge when raw is past maxPodObjects or
// maxPodMembers.
func checkShape(raw []byte) error {
	if objects, members := podShape(raw); objects > maxPodObjects || members > maxPodMembers {
		return errPodTooLarge{objects: objects, members: members}
	}
	return nil
}

// decodePod checks raw's shape, then decodes it.
func decodePod(raw []byte) (*corev1.Pod, error) {
	if err := checkShape(raw); err != nil {
		return nil, err
	}
	var pod corev1.Pod
	if err := json.Unmarshal(raw, &pod); err != nil {
		return nil, fmt.Errorf("decode pod: %w", err)
	}
	return &pod, nil
}

// podHead is what decide reads of a pod: its metadata and its network
// mode. The decoder skips the rest of the spec without building it.
type podHead struct {
	Metadata json.RawMessage `json:"metadata"`
	Spec     struct {
		HostNetwork bool `json:"hostNetwork"`
	} `json:"spec"`
}

// decodePodHead decodes what decide reads into a pod that holds only
// that: a pod left alone is never decoded whole, nor counted.
func decodePodHead(raw []byte) (*corev1.Pod, error) {
	var h podHead
	if err := json.Unmarshal(raw, &h); err != nil {
		return nil, fmt.Errorf("decode pod: %w", err)
	}
	if err := checkShape(h.Metadata); err != nil {
		return nil, fmt.Errorf("metadata: %w", err)
	}
	pod := &corev1.Pod{}
	if len(h.Metadata) > 0 {
		if err := json.Unmarshal(h.Metadata, &pod.ObjectMeta); err != nil {
			return nil, fmt.Errorf("decode pod metadata: %w", err)
		}
	}
	pod.Spec.HostNetwork = h.Spec.HostNetwork
	return pod, nil
}
