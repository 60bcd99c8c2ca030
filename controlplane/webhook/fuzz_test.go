package webhook

import (
	"encoding/json"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// FuzzParseTemplate: any template file either fails to parse or yields a
// template that validates and produces a JSON patch for a plain pod.
func FuzzParseTemplate(f *testing.F) {
	f.Add([]byte(""))                                                  // empty file: the defaults
	f.Add([]byte("image: x\ndnsPort: 53\nadminPort: 80\n"))            // privileged ports are allowed
	f.Add([]byte(`{"agentResources":{"requests":{"cpu":"1e3m"}}}`))    // JSON with an odd quantity
	f.Add([]byte("stateSizeLimit: 1Ki\nagentArgs: [\"--x\", \"\"]\n")) // empty argument
	f.Add([]byte("proxyUID: 9223372036854775807\n"))                   // int64 max
	f.Add([]byte("command: []\nimage: \"\"\n"))                        // explicit zero values fall back
	f.Add([]byte("dnsPort: 70000\n"))                                  // out of range
	base := DefaultTemplate()
	f.Fuzz(func(t *testing.T, data []byte) {
		tmpl, err := parseTemplate(data, base)
		if err != nil {
			return
		}
		if err := tmpl.validate(); err != nil {
			t.Fatalf("parsed template does not validate: %v", err)
		}
		patch, err := tmpl.patch(&corev1.Pod{})
		if err != nil {
			t.Fatal(err)
		}
		if !json.Valid(patch) {
			t.Fatalf("patch is not JSON: %s", patch)
		}
	})
}
