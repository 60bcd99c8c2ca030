// Package node holds the end-to-end tests that run meshdns where users run
// it: pods created through a real API server, injected by the control
// plane's webhook, started by a real kubelet (internal/testkit/nodetest), with the
// init container programming iptables in the pod's own network namespace
// and the sidecar agent answering the application.
package node
