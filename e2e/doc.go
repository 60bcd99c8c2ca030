// Package e2e holds end-to-end tests that run meshdns against real kernels,
// real network namespaces and unmodified DNS clients. They need root and
// the tools hack/deps.sh installs; outside CI they skip without them (see
// internal/testkit/testenv). The package has no code of its own besides these
// tests; README.md describes what each test proves.
package e2e
