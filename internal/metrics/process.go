package metrics

import (
	"bytes"
	"math"
	"os"
	"strconv"
	"strings"
)

// processDescs are the process_* families of client_golang's process
// collector, with its names and help texts.
var processDescs = []Desc{
	{"process_cpu_seconds_total", "Total user and system CPU time spent in seconds.", CounterType},
	{"process_max_fds", "Maximum number of open file descriptors.", GaugeType},
	{"process_network_receive_bytes_total", "Number of bytes received by the process over the network.", CounterType},
	{"process_network_transmit_bytes_total", "Number of bytes sent by the process over the network.", CounterType},
	{"process_open_fds", "Number of open file descriptors.", GaugeType},
	{"process_resident_memory_bytes", "Resident memory size in bytes.", GaugeType},
	{"process_start_time_seconds", "Start time of the process since unix epoch in seconds.", GaugeType},
	{"process_virtual_memory_bytes", "Virtual memory size in bytes.", GaugeType},
	{"process_virtual_memory_max_bytes", "Maximum amount of virtual memory available in bytes.", GaugeType},
}

// ProcessCollector writes the process_* families from /proc/self (Linux;
// elsewhere the families it cannot read are left out). Proc is the proc
// file system's mount point, "/proc" when empty.
type ProcessCollector struct {
	Proc string
}

// userHZ is the unit of the times in /proc/<pid>/stat: USER_HZ, 100 on
// every Linux architecture Go supports (the kernel ABI fixes it).
const userHZ = 100

func (ProcessCollector) Describe() []Desc { return processDescs }

func (p ProcessCollector) Collect(w *Writer) {
	proc := p.Proc
	if proc == "" {
		proc = "/proc"
	}
	if st, ok := readStat(proc); ok {
		w.Sample("process_cpu_seconds_total", "", nil, nil, float64(st.utime+st.stime)/userHZ)
		w.Sample("process_virtual_memory_bytes", "", nil, nil, float64(st.vsize))
		w.Sample("process_resident_memory_bytes", "", nil, nil, float64(st.rss*uint64(os.Getpagesize())))
		if boot, ok := bootTime(proc); ok {
			w.Sample("process_start_time_seconds", "", nil, nil, float64(boot)+float64(st.starttime)/userHZ)
		}
	}
	if fds, err := os.ReadDir(proc + "/self/fd"); err == nil {
		w.Sample("process_open_fds", "", nil, nil, float64(len(fds)))
	}
	if b, err := os.ReadFile(proc + "/self/limits"); err == nil {
		if v, ok := softLimit(b, "Max open files"); ok {
			w.Sample("process_max_fds", "", nil, nil, v)
		}
		if v, ok := softLimit(b, "Max address space"); ok {
			w.Sample("process_virtual_memory_max_bytes", "", nil, nil, v)
		}
	}
	if b, err := os.ReadFile(proc + "/self/net/netstat"); err == nil {
		if in, out, ok := ipOctets(b); ok {
			w.Sample("process_network_receive_bytes_total", "", nil, nil, in)
			w.Sample("process_network_transmit_bytes_total", "", nil, nil, out)
		}
	}
}

type procStat struct {
	utime, stime, starttime, vsize, rss uint64
}

// readStat reads /proc/self/stat (proc(5)): the command name, in
// parentheses, may hold spaces, so fields are counted after its last ')'.
func readStat(proc string) (procStat, bool) {
	b, err := os.ReadFile(proc + "/self/stat")
	if err != nil {
		return procStat{}, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, false
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state): field n is f[n-3].
	if len(f) < 22 {
		return procStat{}, false
	}
	var st procStat
	for _, x := range []struct {
		n int
		p *uint64
	}{{14, &st.utime}, {15, &st.stime}, {22, &st.starttime}, {23, &st.vsize}, {24, &st.rss}} {
		v, err := strconv.ParseUint(f[x.n-3], 10, 64)
		if err != nil {
			return procStat{}, false
		}
		*x.p = v
	}
	return st, true
}

// bootTime is the btime line of /proc/stat: seconds since the epoch.
func bootTime(proc string) (uint64, bool) {
	b, err := os.ReadFile(proc + "/stat")
	if err != nil {
		return 0, false
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "btime "); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// softLimit reads a soft limit from /proc/self/limits; "unlimited" is the
// largest uint64, as the kernel's RLIM_INFINITY.
func softLimit(b []byte, name string) (float64, bool) {
	for line := range strings.SplitSeq(string(b), "\n") {
		rest, ok := strings.CutPrefix(line, name)
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			return 0, false
		}
		if f[0] == "unlimited" {
			return math.MaxUint64, true
		}
		v, err := strconv.ParseUint(f[0], 10, 64)
		return float64(v), err == nil
	}
	return 0, false
}

// ipOctets reads InOctets and OutOctets of the IpExt lines of
// /proc/self/net/netstat (a header line of names, then one of values):
// the bytes of the process's network namespace.
func ipOctets(b []byte) (in, out float64, ok bool) {
	lines := strings.Split(string(b), "\n")
	for i := 0; i+1 < len(lines); i++ {
		if !strings.HasPrefix(lines[i], "IpExt:") || !strings.HasPrefix(lines[i+1], "IpExt:") {
			continue
		}
		names, values := strings.Fields(lines[i]), strings.Fields(lines[i+1])
		var found int
		for j := 1; j < len(names) && j < len(values); j++ {
			v, err := strconv.ParseFloat(values[j], 64)
			if err != nil {
				continue
			}
			switch names[j] {
			case "InOctets":
				in, found = v, found+1
			case "OutOctets":
				out, found = v, found+1
			}
		}
		return in, out, found == 2
	}
	return 0, 0, false
}
