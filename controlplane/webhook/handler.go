package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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

// handler answers AdmissionReviews under pol: parse (body, envelope) ->
// decide and build the answer (review) -> write it. Slots bound how many
// bodies and decisions are in memory at once (see limits.go); the answer
// is written after they are given back, so a client slow to read it holds
// none.
func (w *Webhook) handler(pol policy) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		start := time.Now()
		defer func() { w.metrics.duration.Observe(time.Since(start).Seconds()) }()
		resp, status, err := w.answer(rw, r, pol)
		if err != nil {
			outcome := "malformed"
			if status == http.StatusServiceUnavailable {
				outcome = "busy"
				rw.Header().Set("Retry-After", "1")
			}
			w.metrics.requests.WithLabelValues(outcome).Inc()
			w.log.Warn("bad admission request", "remote", r.RemoteAddr, "err", err)
			http.Error(rw, err.Error(), status)
			return
		}
		body, err := json.Marshal(admissionv1.AdmissionReview{
			TypeMeta: metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: "AdmissionReview"},
			Response: resp,
		})
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

// answer reads the request within the webhook's slots and decides; on
// error it returns the HTTP status to answer with.
func (w *Webhook) answer(rw http.ResponseWriter, r *http.Request, pol policy) (*admissionv1.AdmissionResponse, int, error) {
	if r.Method != http.MethodPost {
		return nil, http.StatusMethodNotAllowed, fmt.Errorf("%w: method %s, want POST", errMalformed, r.Method)
	}
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			return nil, http.StatusUnsupportedMediaType, fmt.Errorf("%w: content type %q, want application/json", errMalformed, ct)
		}
	}
	body, release, status, err := w.limits.readBody(rw, r)
	if err != nil {
		return nil, status, err
	}
	defer release()
	if err := w.limits.acquire(r.Context(), w.limits.decide); err != nil {
		return nil, http.StatusServiceUnavailable, err
	}
	defer func() { <-w.limits.decide }()
	req, err := parseReview(body)
	if err != nil {
		return nil, http.StatusBadRequest, err
	}
	return w.review(r.Context(), req, pol), 0, nil
}

// parseReview decodes and checks the envelope of an AdmissionReview.
func parseReview(body []byte) (*requestHead, error) {
	var review reviewHead
	if err := json.Unmarshal(body, &review); err != nil {
		return nil, fmt.Errorf("%w: %v", errMalformed, err)
	}
	if review.APIVersion != admissionv1.SchemeGroupVersion.String() || review.Kind != "AdmissionReview" {
		return nil, fmt.Errorf("%w: apiVersion %q kind %q, want admission.k8s.io/v1 AdmissionReview", errMalformed, review.APIVersion, review.Kind)
	}
	if review.Request == nil {
		return nil, fmt.Errorf("%w: no request", errMalformed)
	}
	if review.Request.UID == "" {
		return nil, fmt.Errorf("%w: request has no uid", errMalformed)
	}
	return review.Request, nil
}

// review answers one well-formed request.
func (w *Webhook) review(ctx context.Context, req *requestHead, pol policy) *admissionv1.AdmissionResponse {
	resp := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
	// A misconfigured webhook configuration may send other objects or
	// operations; let them through untouched.
	if req.Resource != podResource || req.SubResource != "" || req.Operation != admissionv1.Create {
		w.skip("not_a_pod")
		return resp
	}
	head, err := decodePodHead(req.Object)
	if err != nil {
		if w.enforcedIn(req.Namespace) {
			return w.deny(resp, fmt.Errorf("%w; the namespace has an enforcing DNS policy, which meshdns cannot check the pod against", err))
		}
		return w.fail(resp, err)
	}
	enforced := w.enforcedOn(req.Namespace, head.Labels)
	why := decide(head, pol, enforced)
	if why == skipOptOut && enforced {
		return w.deny(resp, errors.New("the pod opts out of meshdns (meshdns.io/inject: \"false\"), but an enforcing DNS policy selects it"))
	}
	if why != inject && !(why == skipInjected && enforced) {
		w.skip(why)
		return resp
	}
	pod, err := decodePod(req.Object)
	switch {
	case err != nil && enforced:
		return w.deny(resp, fmt.Errorf("%w; an enforcing DNS policy selects the pod, which meshdns cannot check", err))
	case err != nil:
		return w.fail(resp, err)
	case injected(pod):
		why = skipInjected // its containers say so
	}
	t, err := w.podTemplate(pod, req)
	if err != nil {
		return w.fail(resp, err)
	}
	if enforced {
		if err := t.checkEnforceable(pod); err != nil {
			return w.deny(resp, err)
		}
	}
	if why == skipInjected {
		w.skip(why)
		return resp
	}
	patch, err := t.patch(pod)
	if err != nil {
		return w.fail(resp, err)
	}
	resp.PatchType = ptr(admissionv1.PatchTypeJSONPatch)
	resp.Patch = patch
	w.metrics.requests.WithLabelValues("injected").Inc()
	if w.log.Enabled(ctx, slog.LevelDebug) {
		w.log.Debug("injected pod", "namespace", req.Namespace, "name", podName(pod, req))
	}
	return resp
}

// podTemplate is the template for pod: moved off Istio's numbers beside
// its sidecar, with the CA the agent is to trust.
func (w *Webhook) podTemplate(pod *corev1.Pod, req *requestHead) (Template, error) {
	t := *w.template.Load()
	if withIstio(pod) {
		t, t.shifted = t.besideIstio()
		if err := t.validate(); err != nil {
			return t, fmt.Errorf("template beside Istio: %w", err)
		}
	}
	if w.cfg.CABundle != nil {
		t.caBundle = w.cfg.CABundle()
	}
	// The webhook only reads what the namespace watch made (no API call
	// here): a namespace whose ConfigMap is not there yet projects the
	// pod's annotation.
	t.caConfigMap = t.secure() && w.cfg.CAConfigMaps != nil && w.cfg.CAConfigMaps.Has(req.Namespace, t.caBundle)
	return t, nil
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

// deny refuses a pod that would escape an enforcing DNS policy.
func (w *Webhook) deny(resp *admissionv1.AdmissionResponse, err error) *admissionv1.AdmissionResponse {
	w.metrics.requests.WithLabelValues("denied").Inc()
	resp.Allowed = false
	resp.Result = &metav1.Status{Status: metav1.StatusFailure, Message: "meshdns: " + err.Error(),
		Code: http.StatusForbidden, Reason: metav1.StatusReasonForbidden}
	return resp
}

// podName is the pod's name, or its generateName prefix: pods of a
// ReplicaSet have no name yet at admission.
func podName(pod *corev1.Pod, req *requestHead) string {
	switch {
	case req.Name != "":
		return req.Name
	case pod.Name != "":
		return pod.Name
	default:
		return pod.GenerateName + "*"
	}
}
