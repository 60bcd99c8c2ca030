//go:build !linux

package proxy

import "time"

// threadCPUTime is not measured outside Linux.
func threadCPUTime() (time.Duration, bool) { return 0, false }
