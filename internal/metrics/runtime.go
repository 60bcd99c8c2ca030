package metrics

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// goDescs are the Go runtime's families, named and explained as
// client_golang's Go collector does, so dashboards built on those names
// read the agent unchanged. memstats figures come from runtime/metrics
// (no stop-the-world, unlike runtime.ReadMemStats), each from the samples
// its help text names.
var goDescs = []struct {
	desc    Desc
	samples []string // runtime/metrics names summed; none: computed in Collect
}{
	{Desc{"go_gc_duration_seconds", "A summary of the wall-time pause (stop-the-world) duration in garbage collection cycles.", SummaryType}, nil},
	{Desc{"go_gc_gogc_percent", "Heap size target percentage configured by the user, otherwise 100. This value is set by the GOGC environment variable, and the runtime/debug.SetGCPercent function. Sourced from /gc/gogc:percent.", GaugeType}, []string{"/gc/gogc:percent"}},
	{Desc{"go_gc_gomemlimit_bytes", "Go runtime memory limit configured by the user, otherwise math.MaxInt64. This value is set by the GOMEMLIMIT environment variable, and the runtime/debug.SetMemoryLimit function. Sourced from /gc/gomemlimit:bytes.", GaugeType}, []string{"/gc/gomemlimit:bytes"}},
	{Desc{"go_goroutines", "Number of goroutines that currently exist.", GaugeType}, nil},
	{Desc{"go_info", "Information about the Go environment.", GaugeType}, nil},
	{Desc{"go_memstats_alloc_bytes", "Number of bytes allocated in heap and currently in use. Equals to /memory/classes/heap/objects:bytes.", GaugeType}, []string{"/memory/classes/heap/objects:bytes"}},
	{Desc{"go_memstats_alloc_bytes_total", "Total number of bytes allocated in heap until now, even if released already. Equals to /gc/heap/allocs:bytes.", CounterType}, []string{"/gc/heap/allocs:bytes"}},
	{Desc{"go_memstats_buck_hash_sys_bytes", "Number of bytes used by the profiling bucket hash table. Equals to /memory/classes/profiling/buckets:bytes.", GaugeType}, []string{"/memory/classes/profiling/buckets:bytes"}},
	{Desc{"go_memstats_frees_total", "Total number of heap objects frees. Equals to /gc/heap/frees:objects + /gc/heap/tiny/allocs:objects.", CounterType}, []string{"/gc/heap/frees:objects", "/gc/heap/tiny/allocs:objects"}},
	{Desc{"go_memstats_gc_sys_bytes", "Number of bytes used for garbage collection system metadata. Equals to /memory/classes/metadata/other:bytes.", GaugeType}, []string{"/memory/classes/metadata/other:bytes"}},
	{Desc{"go_memstats_heap_alloc_bytes", "Number of heap bytes allocated and currently in use, same as go_memstats_alloc_bytes. Equals to /memory/classes/heap/objects:bytes.", GaugeType}, []string{"/memory/classes/heap/objects:bytes"}},
	{Desc{"go_memstats_heap_idle_bytes", "Number of heap bytes waiting to be used. Equals to /memory/classes/heap/released:bytes + /memory/classes/heap/free:bytes.", GaugeType}, []string{"/memory/classes/heap/released:bytes", "/memory/classes/heap/free:bytes"}},
	{Desc{"go_memstats_heap_inuse_bytes", "Number of heap bytes that are in use. Equals to /memory/classes/heap/objects:bytes + /memory/classes/heap/unused:bytes", GaugeType}, []string{"/memory/classes/heap/objects:bytes", "/memory/classes/heap/unused:bytes"}},
	{Desc{"go_memstats_heap_objects", "Number of currently allocated objects. Equals to /gc/heap/objects:objects.", GaugeType}, []string{"/gc/heap/objects:objects"}},
	{Desc{"go_memstats_heap_released_bytes", "Number of heap bytes released to OS. Equals to /memory/classes/heap/released:bytes.", GaugeType}, []string{"/memory/classes/heap/released:bytes"}},
	{Desc{"go_memstats_heap_sys_bytes", "Number of heap bytes obtained from system. Equals to /memory/classes/heap/objects:bytes + /memory/classes/heap/unused:bytes + /memory/classes/heap/released:bytes + /memory/classes/heap/free:bytes.", GaugeType}, []string{"/memory/classes/heap/objects:bytes", "/memory/classes/heap/unused:bytes", "/memory/classes/heap/released:bytes", "/memory/classes/heap/free:bytes"}},
	{Desc{"go_memstats_last_gc_time_seconds", "Number of seconds since 1970 of last garbage collection.", GaugeType}, nil},
	{Desc{"go_memstats_mallocs_total", "Total number of heap objects allocated, both live and gc-ed. Semantically a counter version for go_memstats_heap_objects gauge. Equals to /gc/heap/allocs:objects + /gc/heap/tiny/allocs:objects.", CounterType}, []string{"/gc/heap/allocs:objects", "/gc/heap/tiny/allocs:objects"}},
	{Desc{"go_memstats_mcache_inuse_bytes", "Number of bytes in use by mcache structures. Equals to /memory/classes/metadata/mcache/inuse:bytes.", GaugeType}, []string{"/memory/classes/metadata/mcache/inuse:bytes"}},
	{Desc{"go_memstats_mcache_sys_bytes", "Number of bytes used for mcache structures obtained from system. Equals to /memory/classes/metadata/mcache/inuse:bytes + /memory/classes/metadata/mcache/free:bytes.", GaugeType}, []string{"/memory/classes/metadata/mcache/inuse:bytes", "/memory/classes/metadata/mcache/free:bytes"}},
	{Desc{"go_memstats_mspan_inuse_bytes", "Number of bytes in use by mspan structures. Equals to /memory/classes/metadata/mspan/inuse:bytes.", GaugeType}, []string{"/memory/classes/metadata/mspan/inuse:bytes"}},
	{Desc{"go_memstats_mspan_sys_bytes", "Number of bytes used for mspan structures obtained from system. Equals to /memory/classes/metadata/mspan/inuse:bytes + /memory/classes/metadata/mspan/free:bytes.", GaugeType}, []string{"/memory/classes/metadata/mspan/inuse:bytes", "/memory/classes/metadata/mspan/free:bytes"}},
	{Desc{"go_memstats_next_gc_bytes", "Number of heap bytes when next garbage collection will take place. Equals to /gc/heap/goal:bytes.", GaugeType}, []string{"/gc/heap/goal:bytes"}},
	{Desc{"go_memstats_other_sys_bytes", "Number of bytes used for other system allocations. Equals to /memory/classes/other:bytes.", GaugeType}, []string{"/memory/classes/other:bytes"}},
	{Desc{"go_memstats_stack_inuse_bytes", "Number of bytes obtained from system for stack allocator in non-CGO environments. Equals to /memory/classes/heap/stacks:bytes.", GaugeType}, []string{"/memory/classes/heap/stacks:bytes"}},
	{Desc{"go_memstats_stack_sys_bytes", "Number of bytes obtained from system for stack allocator. Equals to /memory/classes/heap/stacks:bytes + /memory/classes/os-stacks:bytes.", GaugeType}, []string{"/memory/classes/heap/stacks:bytes", "/memory/classes/os-stacks:bytes"}},
	{Desc{"go_memstats_sys_bytes", "Number of bytes obtained from system. Equals to /memory/classes/total:byte.", GaugeType}, []string{"/memory/classes/total:bytes"}},
	{Desc{"go_sched_gomaxprocs_threads", "The current runtime.GOMAXPROCS setting, or the number of operating system threads that can execute user-level Go code simultaneously. Sourced from /sched/gomaxprocs:threads.", GaugeType}, []string{"/sched/gomaxprocs:threads"}},
	{Desc{"go_threads", "Number of OS threads created.", GaugeType}, nil},
}

// GoCollector writes the Go runtime's go_* families.
type GoCollector struct{}

func (GoCollector) Describe() []Desc {
	ds := make([]Desc, len(goDescs))
	for i, g := range goDescs {
		ds[i] = g.desc
	}
	return ds
}

func (GoCollector) Collect(w *Writer) {
	// The distinct runtime/metrics names, read in one call.
	index := map[string]int{}
	var samples []metrics.Sample
	for _, g := range goDescs {
		for _, n := range g.samples {
			if _, ok := index[n]; !ok {
				index[n] = len(samples)
				samples = append(samples, metrics.Sample{Name: n})
			}
		}
	}
	metrics.Read(samples)

	var gc debug.GCStats
	gc.PauseQuantiles = make([]time.Duration, 5) // min, 25%, 50%, 75%, max
	debug.ReadGCStats(&gc)

	for _, g := range goDescs {
		name := g.desc.Name
		switch name {
		case "go_gc_duration_seconds":
			q := make([]float64, len(gc.PauseQuantiles))
			for i, d := range gc.PauseQuantiles {
				q[i] = d.Seconds()
			}
			w.Summary(name, []float64{0, 0.25, 0.5, 0.75, 1}, q, gc.PauseTotal.Seconds(), uint64(gc.NumGC))
		case "go_goroutines":
			w.Sample(name, "", nil, nil, float64(runtime.NumGoroutine()))
		case "go_info":
			w.Sample(name, "", []string{"version"}, []string{runtime.Version()}, 1)
		case "go_memstats_last_gc_time_seconds":
			var t float64
			if !gc.LastGC.IsZero() {
				t = float64(gc.LastGC.UnixNano()) / 1e9
			}
			w.Sample(name, "", nil, nil, t)
		case "go_threads":
			n, _ := runtime.ThreadCreateProfile(nil)
			w.Sample(name, "", nil, nil, float64(n))
		default:
			var v float64
			for _, n := range g.samples {
				v += sampleValue(samples[index[n]].Value)
			}
			w.Sample(name, "", nil, nil, v)
		}
	}
}

func sampleValue(v metrics.Value) float64 {
	switch v.Kind() {
	case metrics.KindUint64:
		return float64(v.Uint64())
	case metrics.KindFloat64:
		return v.Float64()
	}
	return 0 // a name this Go does not know
}
