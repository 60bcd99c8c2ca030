package webhook

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// patchOp is one RFC 6902 JSON Patch operation. The webhook only adds.
type patchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}

// patch returns the JSON Patch that injects t into pod. The containers go
// first among the init containers: the redirect must be in place, and the
// agent running, before any other init container resolves a name.
func (t *Template) patch(pod *corev1.Pod) ([]byte, error) {
	for _, v := range pod.Spec.Volumes {
		if v.Name == StateVolumeName || v.Name == IdentityVolumeName || v.Name == PodInfoVolumeName {
			return nil, fmt.Errorf("pod already has a volume named %s", v.Name)
		}
	}
	var ops []patchOp
	annotations := t.annotations()
	if pod.Annotations == nil {
		ops = append(ops, patchOp{"add", "/metadata/annotations", annotations})
	} else {
		for _, k := range sortedKeys(annotations) {
			ops = append(ops, patchOp{"add", "/metadata/annotations/" + escapeJSONPointer(k), annotations[k]})
		}
	}
	first := t.firstContainers()
	if len(pod.Spec.InitContainers) == 0 {
		ops = append(ops, patchOp{"add", "/spec/initContainers", first})
	} else {
		for i, c := range first {
			ops = append(ops, patchOp{"add", "/spec/initContainers/" + strconv.Itoa(i), c})
		}
	}
	vols := []corev1.Volume{t.stateVolume(), t.podInfoVolume()}
	if t.secure() {
		vols = append(vols, t.identityVolume())
	}
	if len(pod.Spec.Volumes) == 0 {
		ops = append(ops, patchOp{"add", "/spec/volumes", vols})
	} else {
		for _, v := range vols {
			ops = append(ops, patchOp{"add", "/spec/volumes/-", v})
		}
	}
	return json.Marshal(ops)
}

// escapeJSONPointer escapes a map key for a JSON Pointer (RFC 6901 section
// 3): annotation keys contain "/".
func escapeJSONPointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}
