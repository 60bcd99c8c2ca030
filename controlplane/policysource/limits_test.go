package policysource

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	"github.com/meshdns/meshdns/pkg/policy"
)

// crdFiles are every copy of the DNSPolicy CRD that is installed.
var crdFiles = []string{
	"../../examples/kubernetes/15-dnspolicy-crd.yaml",
	"../../charts/meshdns/crds/dnspolicies.meshdns.io.yaml",
}

// TestLimitsMatchCRD: every bound of the CRD's schema, in every copy, is
// the Go constant the control plane and the agent apply (so a file, the
// validate command and the agent refuse what the API server refuses), or
// one the control plane's own writes stay within. A bound added to the
// CRD fails here until it is given its constant.
func TestLimitsMatchCRD(t *testing.T) {
	want := map[string]int64{
		// What a policy may hold: pkg/policy's limits.
		"spec.rules.maxItems":                       policy.MaxRules,
		"spec.rules.items.pattern.maxLength":        policy.MaxPatternLength,
		"status.conditions.items.message.maxLength": maxConditionMessage,
		// metav1.Condition's own bounds: the control plane writes the
		// constant type Accepted and reasons Accepted and Invalid, the
		// generation of the object.
		"status.conditions.items.type.maxLength":             316,
		"status.conditions.items.reason.minLength":           1,
		"status.conditions.items.reason.maxLength":           1024,
		"status.conditions.items.observedGeneration.minimum": 0,
	}
	for _, f := range crdFiles {
		t.Run(f, func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var crd struct {
				Spec struct {
					Versions []struct {
						Name   string
						Schema struct {
							OpenAPIV3Schema map[string]any `json:"openAPIV3Schema"`
						}
					}
				}
			}
			if err := yaml.Unmarshal(data, &crd); err != nil {
				t.Fatal(err)
			}
			if len(crd.Spec.Versions) != 1 {
				t.Fatalf("%d versions: give each its limits", len(crd.Spec.Versions))
			}
			got := map[string]int64{}
			bounds(crd.Spec.Versions[0].Schema.OpenAPIV3Schema, "", got)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("the CRD's bounds (-Go +CRD):\n%s", diff)
			}
		})
	}
	for _, s := range []string{ConditionAccepted, Condition(0, nil, time.Time{}).Reason, Condition(0, errors.New("x"), time.Time{}).Reason} {
		if len(s) > int(want["status.conditions.items.type.maxLength"]) || len(s) > int(want["status.conditions.items.reason.maxLength"]) {
			t.Errorf("%q is over a bound of the condition", s)
		}
	}
}

// bounds collects every numeric bound (max*, min*) of a schema node and
// its children into out, by path: "spec.rules.items.pattern.maxLength".
func bounds(node map[string]any, path string, out map[string]int64) {
	join := func(p, k string) string {
		if p == "" {
			return k
		}
		return p + "." + k
	}
	for k, v := range node {
		switch {
		case strings.HasPrefix(k, "max") || strings.HasPrefix(k, "min"):
			n, ok := v.(float64)
			if !ok {
				panic(fmt.Sprintf("%s: bound %v not a number", join(path, k), v))
			}
			out[join(path, k)] = int64(n)
		case k == "properties":
			for name, child := range v.(map[string]any) {
				bounds(child.(map[string]any), join(path, name), out)
			}
		case k == "items" || k == "additionalProperties":
			if child, ok := v.(map[string]any); ok {
				bounds(child, join(path, k), out)
			}
		}
	}
}
