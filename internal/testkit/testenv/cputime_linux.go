package testenv

import (
	"syscall"
	"time"
	"unsafe"
)

// clockThreadCPUTime is CLOCK_THREAD_CPUTIME_ID (linux/time.h).
const clockThreadCPUTime = 3

// ThreadCPUTime is the CPU time the calling OS thread has used. Benchmarks
// report it beside wall time because the machines they run on are shared:
// time spent waiting for a CPU is not the code's cost.
func ThreadCPUTime() (time.Duration, bool) {
	var ts syscall.Timespec
	if _, _, errno := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockThreadCPUTime, uintptr(unsafe.Pointer(&ts)), 0); errno != 0 {
		return 0, false
	}
	return time.Duration(ts.Nano()), true
}

// ProcessCPUTime is the user+system CPU time of the whole process,
// garbage collector included.
func ProcessCPUTime() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
