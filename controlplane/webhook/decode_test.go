package webhook

import (
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
)

func TestPodShape(t *testing.T) {
	tests := []struct {
		name                  string
		raw                   string
		wantObjects, wantMems int
	}{
		{name: "empty", raw: ``},
		{name: "flat object", raw: `{"a":1,"b":[1,2,3]}`, wantObjects: 1, wantMems: 3},
		{name: "braces and commas in strings", raw: `{"a":"{,}","b":"\"{,"}`, wantObjects: 1, wantMems: 1},
		{name: "escaped backslash ends the string", raw: `{"a":"\\","b":{}}`, wantObjects: 2, wantMems: 1},
		{name: "array of empty objects", raw: `[{},{},{}]`, wantObjects: 3, wantMems: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objects, members := podShape([]byte(tt.raw))
			if diff := cmp.Diff([2]int{tt.wantObjects, tt.wantMems}, [2]int{objects, members}); diff != "" {
				t.Errorf("(objects, members) (-want +got):\n%s", diff)
			}
		})
	}
}

// TestReviewCostBounded sends the reviews that once cost the control plane
// hundreds of MiB each and checks what answering one allocates: a few
// times its body at most, never in proportion to the objects it lists.
func TestReviewCostBounded(t *testing.T) {
	w, _ := newTestWebhook(t, Config{})
	tests := []struct {
		name string
		path string
		raw  string
	}{
		// 1.3 million empty containers in a namespace that opted in.
		{name: "container bomb", path: "/inject", raw: `{"spec":{"containers":[` + strings.Repeat(`{},`, 1_300_000) + `{}]}}`},
		// A million tolerations in a pod that did not opt in: left
		// alone without being decoded.
		{name: "tolerations, not opted in", path: "/inject/annotated", raw: `{"metadata":{"name":"p"},"spec":{"tolerations":[` + strings.Repeat(`{},`, 1_000_000) + `{}]}}`},
		// The same bomb in the envelope's fields the webhook never reads.
		{name: "user info bomb", path: "/inject", raw: `{"spec":{"containers":[{"name":"app","image":"app"}]}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := reviewWith(t, func(r *admissionv1.AdmissionRequest) {
				r.Object.Raw = []byte(tt.raw)
				if tt.name == "user info bomb" {
					r.UserInfo.Extra = map[string]authenticationv1.ExtraValue{}
					for i := range 200_000 {
						r.UserInfo.Extra["k"+strconv.Itoa(i)] = nil
					}
				}
			})
			if len(body) > 4<<20 {
				t.Fatalf("body %d bytes, over the default limit", len(body))
			}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			resp := decodeResponse(t, post(t, w, tt.path, body))
			runtime.ReadMemStats(&after)
			if !resp.Allowed {
				t.Errorf("denied: %+v", resp.Result)
			}
			// The body (read by the test's recorder and the handler) and
			// the raw pod it holds, with room for the decoder's buffers.
			alloc, limit := after.TotalAlloc-before.TotalAlloc, uint64(4*len(body)+(8<<20))
			t.Logf("%d-byte review: %d bytes allocated", len(body), alloc)
			if alloc > limit {
				t.Errorf("answering a %d-byte review allocated %d bytes, want at most %d", len(body), alloc, limit)
			}
		})
	}
}
