package webhook

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

func newTestWebhook(t testing.TB, cfg Config) (*Webhook, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	cfg.Registerer = reg
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	w, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return w, reg
}

// reviewBody is an AdmissionReview for creating pod, as the API server
// sends it.
func reviewBody(t testing.TB, pod *corev1.Pod) []byte {
	t.Helper()
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	return reviewWith(t, func(r *admissionv1.AdmissionRequest) { r.Object = runtime.RawExtension{Raw: raw} })
}

func reviewWith(t testing.TB, edit func(*admissionv1.AdmissionRequest)) []byte {
	t.Helper()
	req := &admissionv1.AdmissionRequest{
		UID:       types.UID("3b7c0a7e-0000-4000-8000-000000000001"),
		Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
		Resource:  podResource,
		Namespace: "app",
		Operation: admissionv1.Create,
		Object:    runtime.RawExtension{Raw: []byte(`{"spec":{"containers":[{"name":"app","image":"app"}]}}`)},
	}
	if edit != nil {
		edit(req)
	}
	b, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request:  req,
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func post(t testing.TB, h http.Handler, path string, body []byte) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return rec
}

func decodeResponse(t testing.TB, rec *httptest.ResponseRecorder) *admissionv1.AdmissionResponse {
	t.Helper()
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatalf("decode response: %v", err)
	}
	if out.APIVersion != "admission.k8s.io/v1" || out.Kind != "AdmissionReview" || out.Response == nil {
		t.Fatalf("response is not an AdmissionReview: %s", rec.Body)
	}
	return out.Response
}

func TestServeHTTPMalformed(t *testing.T) {
	w, _ := newTestWebhook(t, Config{MaxRequestBytes: 1 << 10})
	tests := []struct {
		name        string
		method      string
		contentType string
		body        string
		wantStatus  int
		wantMessage string
	}{
		{name: "GET", method: http.MethodGet, wantStatus: http.StatusMethodNotAllowed, wantMessage: "method GET, want POST"},
		{name: "wrong content type", contentType: "text/plain", body: "{}", wantStatus: http.StatusUnsupportedMediaType, wantMessage: "want application/json"},
		{name: "not JSON", body: "{not json", wantStatus: http.StatusBadRequest, wantMessage: "malformed admission review"},
		{name: "empty body", body: "", wantStatus: http.StatusBadRequest, wantMessage: "malformed admission review"},
		{name: "v1beta1", body: `{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"x"}}`, wantStatus: http.StatusBadRequest, wantMessage: "want admission.k8s.io/v1 AdmissionReview"},
		{name: "wrong kind", body: `{"apiVersion":"admission.k8s.io/v1","kind":"Pod"}`, wantStatus: http.StatusBadRequest, wantMessage: `kind "Pod"`},
		{name: "no request", body: `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`, wantStatus: http.StatusBadRequest, wantMessage: "no request"},
		{name: "no uid", body: `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{}}`, wantStatus: http.StatusBadRequest, wantMessage: "request has no uid"},
		{name: "too big", body: `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","x":"` + strings.Repeat("a", 2<<10) + `"}`, wantStatus: http.StatusRequestEntityTooLarge, wantMessage: "body over 1024 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			method := tt.method
			if method == "" {
				method = http.MethodPost
			}
			r := httptest.NewRequest(method, "/inject", strings.NewReader(tt.body))
			ct := tt.contentType
			if ct == "" {
				ct = "application/json"
			}
			r.Header.Set("Content-Type", ct)
			rec := httptest.NewRecorder()
			w.ServeHTTP(rec, r)
			if diff := cmp.Diff(tt.wantStatus, rec.Code); diff != "" {
				t.Errorf("status (-want +got):\n%s\nbody: %s", diff, rec.Body)
			}
			if !strings.Contains(rec.Body.String(), tt.wantMessage) {
				t.Errorf("body %q does not contain %q", rec.Body, tt.wantMessage)
			}
		})
	}
	if got := testutil.ToFloat64(w.metrics.requests.WithLabelValues("malformed")); got != float64(len(tests)) {
		t.Errorf("malformed counter = %v, want %d", got, len(tests))
	}
}

func TestServeHTTPReview(t *testing.T) {
	w, _ := newTestWebhook(t, Config{})
	closed, _ := newTestWebhook(t, Config{FailClosed: true})
	plain := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}}
	optOut := plain.DeepCopy()
	optOut.Annotations = map[string]string{AnnotationInject: "false"}
	optIn := plain.DeepCopy()
	optIn.Annotations = map[string]string{AnnotationInject: "true"}
	clash := plain.DeepCopy()
	clash.Spec.Volumes = []corev1.Volume{{Name: StateVolumeName}}

	tests := []struct {
		name        string
		handler     http.Handler
		path        string
		body        []byte
		wantAllowed bool
		wantPatch   bool
		wantWarning string
		wantResult  string
	}{
		{name: "namespace enabled injects", path: "/inject", body: reviewBody(t, plain), wantAllowed: true, wantPatch: true},
		{name: "namespace enabled honours opt out", path: "/inject", body: reviewBody(t, optOut), wantAllowed: true},
		{name: "annotated path skips plain pod", path: "/inject/annotated", body: reviewBody(t, plain), wantAllowed: true},
		{name: "annotated path injects opt in", path: "/inject/annotated", body: reviewBody(t, optIn), wantAllowed: true, wantPatch: true},
		{
			name: "other resource passes", path: "/inject", wantAllowed: true,
			body: reviewWith(t, func(r *admissionv1.AdmissionRequest) {
				r.Resource = metav1.GroupVersionResource{Version: "v1", Resource: "services"}
			}),
		},
		{
			name: "pod update passes", path: "/inject", wantAllowed: true,
			body: reviewWith(t, func(r *admissionv1.AdmissionRequest) { r.Operation = admissionv1.Update }),
		},
		{
			name: "undecodable pod is admitted with a warning", path: "/inject", wantAllowed: true,
			body:        reviewWith(t, func(r *admissionv1.AdmissionRequest) { r.Object.Raw = []byte(`{"spec":{"containers":"nope"}}`) }),
			wantWarning: "meshdns sidecar not injected: decode pod",
		},
		{
			name: "internal error is admitted with a warning", path: "/inject", wantAllowed: true,
			body: reviewBody(t, clash), wantWarning: "already has a volume named meshdns-state",
		},
		{
			name: "fail closed denies on internal error", handler: closed, path: "/inject",
			body: reviewBody(t, clash), wantResult: "already has a volume named meshdns-state",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := tt.handler
			if h == nil {
				h = w
			}
			resp := decodeResponse(t, post(t, h, tt.path, tt.body))
			if resp.UID != "3b7c0a7e-0000-4000-8000-000000000001" {
				t.Errorf("uid = %q, not echoed", resp.UID)
			}
			if resp.Allowed != tt.wantAllowed {
				t.Errorf("allowed = %v, want %v", resp.Allowed, tt.wantAllowed)
			}
			if got := len(resp.Patch) > 0; got != tt.wantPatch {
				t.Errorf("patch present = %v, want %v", got, tt.wantPatch)
			}
			if tt.wantPatch && (resp.PatchType == nil || *resp.PatchType != admissionv1.PatchTypeJSONPatch) {
				t.Errorf("patchType = %v, want JSONPatch", resp.PatchType)
			}
			if got := strings.Join(resp.Warnings, "\n"); !strings.Contains(got, tt.wantWarning) || (tt.wantWarning == "") != (got == "") {
				t.Errorf("warnings = %q, want %q", got, tt.wantWarning)
			}
			if tt.wantResult != "" && (resp.Result == nil || !strings.Contains(resp.Result.Message, tt.wantResult)) {
				t.Errorf("result = %+v, want message %q", resp.Result, tt.wantResult)
			}
		})
	}
	for outcome, want := range map[string]float64{"injected": 2, "skipped": 4, "error": 2} {
		if got := testutil.ToFloat64(w.metrics.requests.WithLabelValues(outcome)); got != want {
			t.Errorf("requests{outcome=%s} = %v, want %v", outcome, got, want)
		}
	}
}

// TestServeHTTPIdempotent feeds the injected pod back, as a reinvocation
// or a second webhook would.
func TestServeHTTPIdempotent(t *testing.T) {
	w, _ := newTestWebhook(t, Config{})
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}}
	resp := decodeResponse(t, post(t, w, "/inject", reviewBody(t, pod)))
	injected := applyPatch(t, pod, resp.Patch)
	again := decodeResponse(t, post(t, w, "/inject", reviewBody(t, injected)))
	if len(again.Patch) != 0 || !again.Allowed {
		t.Errorf("second review of an injected pod: allowed=%v patch=%s", again.Allowed, again.Patch)
	}
}

// FuzzServeHTTP: any body gets a 4xx or a well-formed AdmissionReview that
// never denies the pod (FailClosed is off).
func FuzzServeHTTP(f *testing.F) {
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","resource":{"version":"v1","resource":"pods"},"operation":"CREATE","object":{"spec":{}}}}`)) // minimal pod
	f.Add(reviewBody(f, &corev1.Pod{}))                                                                                                                                                          // full review, empty pod
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","resource":{"version":"v1","resource":"pods"},"operation":"CREATE","object":null}}`))        // null object
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","resource":{"version":"v1","resource":"pods"},"operation":"CREATE","object":{"metadata":{"annotations":null},"spec":{"volumes":[{}],"initContainers":[{}]}}}}`))
	f.Add([]byte(`[]`)) // not an object
	w, _ := newTestWebhook(f, Config{})
	f.Fuzz(func(t *testing.T, body []byte) {
		rec := post(t, w, "/inject", body)
		if rec.Code >= 400 && rec.Code < 500 {
			return
		}
		resp := decodeResponse(t, rec)
		if !resp.Allowed {
			t.Fatalf("denied: %+v", resp)
		}
		if len(resp.Patch) > 0 {
			var ops []map[string]any
			if err := json.Unmarshal(resp.Patch, &ops); err != nil {
				t.Fatalf("patch is not JSON: %v", err)
			}
		}
	})
}

func BenchmarkServeHTTPInject(b *testing.B) {
	w, _ := newTestWebhook(b, Config{})
	body := reviewBody(b, &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}})
	b.ReportAllocs()
	for b.Loop() {
		r := httptest.NewRequest(http.MethodPost, "/inject", bytes.NewReader(body))
		rec := httptest.NewRecorder()
		w.ServeHTTP(rec, r)
		if rec.Code != http.StatusOK {
			b.Fatal(rec.Code)
		}
		_, _ = io.Copy(io.Discard, rec.Body)
	}
}
