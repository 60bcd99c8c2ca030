// Package webhook is the mutating admission webhook that injects the meshdns
// agent into pods.
//
// The API server sends an admission.k8s.io/v1 AdmissionReview for each pod it
// is about to create; the webhook answers with a JSONPatch that adds two init
// containers and a volume:
//
//   - meshdns-init runs `meshdns iptables apply` as root with NET_ADMIN
//     only (NET_RAW too for the iptables binaries' backends), installs the
//     DNS redirect and exits;
//   - meshdns-agent is a native sidecar (an init container with
//     restartPolicy: Always) running as the proxy uid/gid that the iptables
//     rules exclude, so its own upstream queries are not redirected back to
//     itself;
//   - meshdns-state is a small in-memory emptyDir for the agent's state.
//
// Which pods are injected is decided in two places. The
// MutatingWebhookConfiguration's selectors decide which pods the API server
// sends at all (namespace label meshdns.io/inject=enabled sends every pod to
// /inject; other namespaces send their pods to /inject/annotated), and the
// handler applies the pod's annotation meshdns.io/inject ("false" opts out,
// "true" opts in). hostNetwork pods and pods injected already are left
// alone, so the webhook may be called any number of times for one pod.
//
// The injected containers come from a Template: defaults in Config, overridden
// by a YAML or JSON file (a mounted ConfigMap) that is re-read when it
// changes. The serving certificate is re-read when its files change too, so
// certificate rotation needs no restart.
package webhook
