package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var podResource = metav1.GroupVersionResource{Version: "v1", Resource: "pods"}

// errMalformed marks a request that is not an AdmissionReview we can answer
// at all; it gets HTTP 400 with the message.
var errMalformed = errors.New("malformed admission review")

// handler answers AdmissionReviews under pol.
func (w *Webhook) handler(pol policy) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		start := time.Now()
		defer func() { w.metrics.duration.Observe(time.Since(start).Seconds()) }()
		review, status, err := w.readReview(rw, r)
		if err != nil {
			w.metrics.requests.WithLabelValues("malformed").Inc()
			w.log.Warn("bad admission request", "remote", r.RemoteAddr, "err", err)
			http.Error(rw, err.Error(), status)
			return
		}
		review.Response = w.review(r.Context(), review.Request, pol)
		review.Request = nil // the API server ignores it; do not echo the pod back
		body, err := json.Marshal(review)
		if err != nil {
			// Cannot happen for these types; answer so the API server
			// applies its failurePolicy.
			http.Error(rw, "encode admission response: "+err.Error(), http.StatusInternalServerError)
			return
		}
		rw.Header().Set("Content-Type", "application/json")
		_, _ = rw.Write(body)
	})
}

// readReview decodes and checks the request; on error it returns the HTTP
// status to answer with.
func (w *Webhook) readReview(rw http.ResponseWriter, r *http.Request) (*admissionv1.AdmissionReview, int, error) {
	if r.Method != http.MethodPost {
		return nil, http.StatusMethodNotAllowed, fmt.Errorf("%w: method %s, want POST", errMalformed, r.Method)
	}
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			return nil, http.StatusUnsupportedMediaType, fmt.Errorf("%w: content type %q, want application/json", errMalformed, ct)
		}
	}
	body, err := io.ReadAll(http.MaxBytesReader(rw, r.Body, w.cfg.MaxRequestBytes))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return nil, http.StatusRequestEntityTooLarge, fmt.Errorf("%w: body over %d bytes", errMalformed, w.cfg.MaxRequestBytes)
		}
		return nil, http.StatusBadRequest, fmt.Errorf("%w: read body: %v", errMalformed, err)
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil {
		return nil, http.StatusBadRequest, fmt.Errorf("%w: %v", errMalformed, err)
	}
	gvk := review.GroupVersionKind()
	if gvk != admissionv1.SchemeGroupVersion.WithKind("AdmissionReview") {
		return nil, http.StatusBadRequest, fmt.Errorf("%w: apiVersion %q kind %q, want admission.k8s.io/v1 AdmissionReview", errMalformed, review.APIVersion, review.Kind)
	}
	if review.Request == nil {
		return nil, http.StatusBadRequest, fmt.Errorf("%w: no request", errMalformed)
	}
	if review.Request.UID == "" {
		return nil, http.StatusBadRequest, fmt.Errorf("%w: request has no uid", errMalformed)
	}
	return &review, 0, nil
}

// review answers one well-formed request.
func (w *Webhook) review(ctx context.Context, req *admissionv1.AdmissionRequest, pol policy) *admissionv1.AdmissionResponse {
	resp := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
	// A misconfigured webhook configuration may send other objects or
	// operations; let them through untouched.
	if req.Resource != podResource || req.SubResource != "" || req.Operation != admissionv1.Create {
		w.skip("not_a_pod")
		return resp
	}
	var pod corev1.Pod
	if err := json.Unmarshal(req.Object.Raw, &pod); err != nil {
		return w.fail(resp, fmt.Errorf("decode pod: %w", err))
	}
	if why := decide(&pod, pol); why != inject {
		w.skip(why)
		return resp
	}
	t := *w.template.Load()
	if withIstio(&pod) {
		t, t.shifted = t.besideIstio()
		if err := t.validate(); err != nil {
			return w.fail(resp, fmt.Errorf("template beside Istio: %w", err))
		}
	}
	if w.cfg.CABundle != nil {
		t.caBundle = w.cfg.CABundle()
	}
	// A dry run must change nothing (sideEffects: NoneOnDryRun): its pod
	// projects the annotation.
	if t.secure() && w.cfg.CAConfigMaps != nil && (req.DryRun == nil || !*req.DryRun) {
		// Well inside the API server's webhook timeout (5s in the
		// manifests); the pod falls back to the annotation rather than
		// waiting.
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := w.cfg.CAConfigMaps.Ensure(cctx, req.Namespace)
		cancel()
		if err != nil {
			w.log.Warn("CA bundle configmap; the pod trusts the CA of its annotation until it is recreated", "namespace", req.Namespace, "err", err)
		}
		t.caConfigMap = err == nil
	}
	patch, err := t.patch(&pod)
	if err != nil {
		return w.fail(resp, err)
	}
	resp.PatchType = ptr(admissionv1.PatchTypeJSONPatch)
	resp.Patch = patch
	w.metrics.requests.WithLabelValues("injected").Inc()
	if w.log.Enabled(ctx, slog.LevelDebug) {
		w.log.Debug("injected pod", "namespace", req.Namespace, "name", podName(&pod, req))
	}
	return resp
}

func (w *Webhook) skip(why skipReason) {
	w.metrics.requests.WithLabelValues("skipped").Inc()
	w.metrics.skipped.WithLabelValues(string(why)).Inc()
}

// fail answers an internal error: the pod is admitted uninjected with a
// warning the client (kubectl) shows, or denied when Config.FailClosed.
func (w *Webhook) fail(resp *admissionv1.AdmissionResponse, err error) *admissionv1.AdmissionResponse {
	w.metrics.requests.WithLabelValues("error").Inc()
	w.log.Error("sidecar injection failed", "err", err)
	msg := "meshdns sidecar not injected: " + err.Error()
	if w.cfg.FailClosed {
		resp.Allowed = false
		resp.Result = &metav1.Status{Status: metav1.StatusFailure, Message: msg, Code: http.StatusInternalServerError, Reason: metav1.StatusReasonInternalError}
		return resp
	}
	resp.Warnings = []string{msg}
	return resp
}

// podName is the pod's name, or its generateName prefix: pods of a
// ReplicaSet have no name yet at admission.
func podName(pod *corev1.Pod, req *admissionv1.AdmissionRequest) string {
	switch {
	case req.Name != "":
		return req.Name
	case pod.Name != "":
		return pod.Name
	default:
		return pod.GenerateName + "*"
	}
}
