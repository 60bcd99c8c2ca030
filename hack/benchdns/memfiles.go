package main

import (
	"bufio"
	"fmt"
	"io"
	"path/filepath"

	"github.com/meshdns/meshdns/internal/atomicfile"
)

// The inputs of the memory benchmark: the same n names, one A record each,
// in the format of each server. Name i is svc-i.ns-(i%100).svc.cluster.local
// with address 10.x.y.z taken from i; the names below changed get another
// one, so a second version of a table answers differently.

func memName(i int) string { return fmt.Sprintf("svc-%d.ns-%d.svc.cluster.local", i, i%namespaces) }

func memAddr(i, changed int) string {
	if i < changed {
		i += 1 << 23
	}
	return fmt.Sprintf("10.%d.%d.%d", byte(i>>16), byte(i>>8), byte(i))
}

// writeLines writes line(i) for every i < n to dir/name and returns the path.
// It replaces the file atomically (internal/atomicfile), so a watching
// server never reads half a file.
func writeLines(dir, name string, n int, head, tail string, line func(w *bufio.Writer, i int)) (string, error) {
	path := filepath.Join(dir, name)
	err := atomicfile.Write(path, 0o600, func(f io.Writer) error {
		w := bufio.NewWriterSize(f, 1<<16)
		w.WriteString(head)
		for i := range n {
			line(w, i)
		}
		w.WriteString(tail)
		return w.Flush()
	})
	return path, err
}

// writeMemTable writes the protojson NameTable the agent reads with
// --nametable-file.
func writeMemTable(dir string, n, changed int) (string, error) {
	return writeLines(dir, fmt.Sprintf("table-%d.json", n), n,
		"{\"authoritative_zones\": [\"cluster.local\"], \"table\": {", "\n}}\n",
		func(w *bufio.Writer, i int) {
			if i > 0 {
				w.WriteByte(',')
			}
			fmt.Fprintf(w, "\n%q: {\"ips\": [%q]}", memName(i), memAddr(i, changed))
		})
}

// writeMemEntries writes the control plane's entries YAML of the same names.
func writeMemEntries(dir string, n, changed int) (string, error) {
	return writeLines(dir, fmt.Sprintf("entries-%d.yaml", n), n, "zones: [cluster.local]\nentries:\n", "",
		func(w *bufio.Writer, i int) {
			fmt.Fprintf(w, "- {hostname: %s, addresses: [%q]}\n", memName(i), memAddr(i, changed))
		})
}

// writeMemHosts writes the hosts file dnsmasq reads with --addn-hosts.
func writeMemHosts(dir string, n int) (string, error) { return writeMemHostsChanged(dir, n, 0) }

// writeMemHostsChanged writes it with the names below changed moved.
func writeMemHostsChanged(dir string, n, changed int) (string, error) {
	return writeLines(dir, fmt.Sprintf("hosts-%d", n), n, "", "", func(w *bufio.Writer, i int) {
		fmt.Fprintf(w, "%s %s\n", memAddr(i, changed), memName(i))
	})
}

// writeMemQueries writes the dnsperf input: every name once.
func writeMemQueries(dir string, n int) (string, error) {
	return writeLines(dir, fmt.Sprintf("queries-%d.txt", n), n, "", "", func(w *bufio.Writer, i int) {
		fmt.Fprintf(w, "%s A\n", memName(i))
	})
}
