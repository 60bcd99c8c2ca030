// Package policysource turns DNSPolicy objects (from the Kubernetes API,
// or the same YAML in a file for VMs and file-only control planes) into
// validated protocol policies, with the control plane's checks beyond the
// CRD's schema. An invalid policy is an error that names the object and
// the field; it never becomes a value an agent could be sent.
package policysource

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/meshdns/meshdns/internal/namewire"
)

// The object's identity, as the CRD in examples/kubernetes defines it.
const (
	APIVersion = "meshdns.io/v1alpha1"
	Kind       = "DNSPolicy"
)

// Spec is a DNSPolicy's spec as the API serves it.
type Spec struct {
	// PodSelector selects pods of the object's namespace; nil or empty
	// selects all of them.
	PodSelector    *metav1.LabelSelector `json:"podSelector,omitempty"`
	Rules          []RuleSpec            `json:"rules,omitempty"`
	OutsideDefault string                `json:"outsideDefault,omitempty"` // "Allow" (or ""), "Deny"
	TableDefault   string                `json:"tableDefault,omitempty"`   // "Allow" (or ""), "Deny"
	DenyResponse   string                `json:"denyResponse,omitempty"`   // "NXDOMAIN" (or ""), "REFUSED"
	Mode           string                `json:"mode,omitempty"`           // "Enforce" (or ""), "Audit"
}

// RuleSpec is one entry of spec.rules.
type RuleSpec struct {
	Pattern string `json:"pattern"`
	Action  string `json:"action"` // "Allow" or "Deny"
}

// Policy is a validated DNSPolicy object.
type Policy struct {
	Namespace, Name string
	// Generation is metadata.generation, for status.observedGeneration.
	Generation int64
	// Created is metadata.creationTimestamp (zero in a file that does
	// not say): the older of two policies keeps its place in its
	// namespace's rule budget (Store).
	Created time.Time
	// Selector selects the pods of Namespace the policy applies to;
	// labels.Everything() when the object selects all.
	Selector labels.Selector
	// DNS is what agents are sent: patterns canonical (lowercase,
	// trailing dot), every rule's Source and DNS.Source "namespace/name".
	DNS namewire.DNSPolicy
}

// FromUnstructured validates an object as the API (or an informer)
// serves it.
func FromUnstructured(u *unstructured.Unstructured) (Policy, error) {
	data, err := u.MarshalJSON()
	if err != nil {
		return Policy{}, fmt.Errorf("DNSPolicy %s/%s: %w", u.GetNamespace(), u.GetName(), err)
	}
	return FromJSON(data)
}

// object is the decoded document: unknown fields are errors, as the API
// server's strict field validation makes them.
type object struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              *Spec          `json:"spec"`
	Status            map[string]any `json:"status,omitempty"`
}

// FromJSON validates one DNSPolicy object in JSON.
func FromJSON(data []byte) (Policy, error) {
	var o object
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&o); err != nil {
		return Policy{}, fmt.Errorf("DNSPolicy: %w", err)
	}
	return validate(o)
}

// ParseFile validates every DNSPolicy document of a YAML (or JSON) file:
// the same objects kubectl would apply. A document without a namespace is
// in namespace "default". It returns the valid policies and the errors of
// the others, joined, one per document; data over MaxFileSize is refused
// whole.
func ParseFile(data []byte) ([]Policy, error) {
	if err := checkFileSize(int64(len(data))); err != nil {
		return nil, err
	}
	if err := countRules(data); err != nil {
		return nil, err
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []Policy
	var errs []error
	for i := 0; ; i++ {
		var raw json.RawMessage
		if err := dec.Decode(&raw); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			errs = append(errs, fmt.Errorf("document %d: %w", i, err))
			break // the decoder cannot resynchronise after a syntax error
		}
		if len(bytes.TrimSpace(raw)) == 0 || string(raw) == "null" {
			continue
		}
		p, err := FromJSON(raw)
		if err != nil {
			errs = append(errs, fmt.Errorf("document %d: %w", i, err))
			continue
		}
		out = append(out, p)
	}
	if len(out) == 0 && len(errs) == 0 {
		errs = append(errs, errors.New("no DNSPolicy in the file"))
	}
	return out, errors.Join(errs...)
}
