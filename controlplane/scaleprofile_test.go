package controlplane_test

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
)

// saveProfile saves the first replica's admin path (a pprof endpoint) as
// name in the MESHDNS_BENCH_PROFILE folder.
func saveProfile(tb testing.TB, admin, path, name string) {
	dir := os.Getenv("MESHDNS_BENCH_PROFILE")
	resp, err := http.Get(admin + path)
	if err != nil {
		tb.Error(err)
		return
	}
	defer resp.Body.Close()
	f, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		tb.Error(err)
		return
	}
	defer f.Close()
	if _, err := io.Copy(f, resp.Body); err != nil {
		tb.Errorf("save %s: %v", name, err)
	}
}

// profileIdle, when MESHDNS_BENCH_PROFILE names a folder, saves the first
// replica's heap in use (after a collection) and its goroutines, at
// stage "0" before the agents connect and "1" once they are connected
// and idle: idle-heap-1.pprof with -base idle-heap-0.pprof is what the
// connected agents hold, by allocation site; idle-goroutines-1.txt
// groups their goroutines by stack.
func profileIdle(tb testing.TB, admin, stage string) {
	if os.Getenv("MESHDNS_BENCH_PROFILE") == "" {
		return
	}
	saveProfile(tb, admin, "/debug/pprof/heap?gc=1", "idle-heap-"+stage+".pprof")
	saveProfile(tb, admin, "/debug/pprof/goroutine?debug=1", "idle-goroutines-"+stage+".txt")
}

// profileUpdates, when MESHDNS_BENCH_PROFILE names a folder, saves the
// first replica's CPU profile of the first MESHDNS_BENCH_PROFILE_SECONDS
// (10) of the update loop (cpu.pprof) and its allocations before and after
// the loop, each after a collection so it is complete (allocs-0.pprof,
// allocs-1.pprof: compare with pprof -base).
// The returned function waits for the profile.
func profileUpdates(tb testing.TB, admin string) func() {
	if os.Getenv("MESHDNS_BENCH_PROFILE") == "" {
		return func() {}
	}
	saveProfile(tb, admin, "/debug/pprof/heap?gc=1", "allocs-0.pprof")
	done := make(chan struct{})
	go func() {
		defer close(done)
		saveProfile(tb, admin, fmt.Sprintf("/debug/pprof/profile?seconds=%d", envInt("MESHDNS_BENCH_PROFILE_SECONDS", 10)), "cpu.pprof")
	}()
	return func() {
		<-done
		saveProfile(tb, admin, "/debug/pprof/heap?gc=1", "allocs-1.pprof")
	}
}
