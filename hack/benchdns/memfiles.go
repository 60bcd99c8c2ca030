package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
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
// It writes to a temporary file renamed into place, so a watching server
// never reads half a file.
func writeLines(dir, name string, n int, head, tail string, line func(w *bufio.Writer, i int)) (string, error) {
	path := filepath.Join(dir, name)
	f, err := os.CreateTemp(dir, name+".tmp*")
	if err != nil {
		return "", err
	}
	w := bufio.NewWriterSize(f, 1<<16)
	w.WriteString(head)
	for i := range n {
		line(w, i)
	}
	w.WriteString(tail)
	if err := w.Flush(); err != nil {
		f.Close()
		os.Remove(f.Name())
		return "", err
	}
	if err := f.Close(); err != nil {
		os.Remove(f.Name())
		return "", err
	}
	return path, os.Rename(f.Name(), path)
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
func writeMemHosts(dir string, n int) (string, error) {
	return writeLines(dir, fmt.Sprintf("hosts-%d", n), n, "", "", func(w *bufio.Writer, i int) {
		fmt.Fprintf(w, "%s %s\n", memAddr(i, 0), memName(i))
	})
}

// writeMemQueries writes the dnsperf input: every name once.
func writeMemQueries(dir string, n int) (string, error) {
	return writeLines(dir, fmt.Sprintf("queries-%d.txt", n), n, "", "", func(w *bufio.Writer, i int) {
		fmt.Fprintf(w, "%s A\n", memName(i))
	})
}
