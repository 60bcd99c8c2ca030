// Package kube holds the end-to-end test of the Kubernetes path: a real
// kube-apiserver and etcd (internal/testkit/kubetest), the control plane with its
// Kubernetes source in-process, an agent in-process connected over real
// gRPC, and DNS questions over real UDP on loopback. It needs no root,
// only the binaries internal/testkit/testenv.KubeAssets finds; README.md lists what
// it proves. The package has no code besides the test.
package kube
