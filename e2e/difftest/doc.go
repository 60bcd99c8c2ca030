// Package difftest holds the differential test of meshdns against the real
// CoreDNS: one real kube-apiserver and etcd (internal/testkit/kubetest), CoreDNS
// with its kubernetes plugin and the meshdns control plane plus one agent
// watching it, a seeded random cluster, and a corpus of DNS questions asked
// of both over real UDP and TCP on loopback. Every difference between the
// replies must belong to a class that docs/coredns-differences.md lists;
// any other fails the test. README.md says how to run it at other sizes.
// The package has no code besides the test.
package difftest
