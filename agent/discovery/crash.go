//go:build !meshdns_crashtest

package discovery

import "github.com/meshdns/meshdns/internal/namewire"

// crashOnApply crashes the agent on a test's version in binaries built
// with the meshdns_crashtest tag (crashtest.go), and is nothing in the
// binaries shipped.
func crashOnApply(string, namewire.RawTable) {}
