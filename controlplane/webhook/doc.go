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
// Where an enforcing DNS policy selects a pod (Config.Policies), the pod is
// injected on either path and refused when its author could undo the
// policy: an opt-out, a container that could run as the agent's uid or gid
// or change the redirect, a forged mark of injection.
//
// A review makes no API call and costs memory bounded whatever its sender
// does: the pod is decoded in two steps (its metadata to decide, the rest
// only for a pod to inject, and only when it is not too large), and bodies,
// decisions and connections take slots (limits.go, NewServer,
// LimitListener). The CA ConfigMaps the agents project come from a watch
// of namespaces (CAConfigMaps), never from a review.
//
// The injected containers come from a Template: defaults in Config, overridden
// by a YAML or JSON file (a mounted ConfigMap) that is re-read when it
// changes. The serving certificate is re-read when its files change too, so
// certificate rotation needs no restart.
package webhook
