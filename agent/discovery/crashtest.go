//go:build meshdns_crashtest

package discovery

import "github.com/meshdns/meshdns/internal/namewire"

// CrashName is the name whose presence in a table makes an agent built
// with the meshdns_crashtest tag panic as it applies the table: the
// "version that crashes the agent" end-to-end tests need, which shipped
// binaries (built without the tag) never contain.
const CrashName = "crash-on-apply.meshdns.test"

// crashOnApply panics when the table holds CrashName.
func crashOnApply(version string, t namewire.RawTable) {
	t(func(host, _ []byte) error {
		if string(host) == CrashName {
			panic("meshdns_crashtest: version " + version + " holds " + CrashName)
		}
		return nil
	}, nil)
}
