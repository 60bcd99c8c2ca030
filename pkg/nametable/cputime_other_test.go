//go:build !linux

package nametable

import "time"

// threadCPUTime is not measured outside Linux.
func threadCPUTime() (time.Duration, bool) { return 0, false }

// processCPUTime is not measured outside Linux.
func processCPUTime() (time.Duration, bool) { return 0, false }
