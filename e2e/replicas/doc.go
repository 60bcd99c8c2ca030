// Package replicas holds the end-to-end test of horizontal scale: two
// `meshdns controlplane` processes (the real binary) watching one real
// kube-apiserver (internal/testkit/kubetest), no leader, and lightweight agents
// (internal/testkit/loadagent) moving between them. README.md lists what it
// proves. The package has no code besides the tests.
package replicas
