//go:build !linux

package testenv

import "time"

// ThreadCPUTime is not measured outside Linux.
func ThreadCPUTime() (time.Duration, bool) { return 0, false }

// ProcessCPUTime is not measured outside Linux.
func ProcessCPUTime() (time.Duration, bool) { return 0, false }
