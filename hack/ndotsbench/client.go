package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// gaiClient is the pod's application: getaddrinfo(name) as a program
// connecting to name calls it (any family, stream sockets: A and AAAA),
// count times, one line per call: the microseconds it took and the
// first IPv4 address, or "error". Built twice from the same source, with
// gcc (glibc's resolver, what getent ahosts calls) and musl-gcc (musl's,
// as in Alpine images), so the two differ only in the resolver.
const gaiClient = `#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <netdb.h>
#include <arpa/inet.h>
int main(int argc, char **argv) {
	if (argc != 3) return 2;
	int n = atoi(argv[2]);
	for (int i = 0; i < n; i++) {
		struct addrinfo hints, *res, *p;
		struct timespec t0, t1;
		memset(&hints, 0, sizeof hints);
		hints.ai_socktype = SOCK_STREAM;
		clock_gettime(CLOCK_MONOTONIC, &t0);
		int rc = getaddrinfo(argv[1], NULL, &hints, &res);
		clock_gettime(CLOCK_MONOTONIC, &t1);
		long us = (t1.tv_sec - t0.tv_sec) * 1000000L + (t1.tv_nsec - t0.tv_nsec) / 1000;
		if (rc != 0) { printf("%ld error\n", us); continue; }
		const char *addr = "none";
		char buf[INET_ADDRSTRLEN];
		for (p = res; p; p = p->ai_next) {
			if (p->ai_family != AF_INET) continue;
			addr = inet_ntop(AF_INET, &((struct sockaddr_in *)p->ai_addr)->sin_addr, buf, sizeof buf);
			break;
		}
		printf("%ld %s\n", us, addr);
		freeaddrinfo(res);
	}
	return 0;
}
`

// client is one libc's build of gaiClient.
type client struct {
	libc string // glibc or musl
	path string
}

// buildClients compiles gaiClient with gcc and musl-gcc into dir.
func buildClients(ctx context.Context, dir string) ([]client, error) {
	src := filepath.Join(dir, "gai.c")
	if err := os.WriteFile(src, []byte(gaiClient), 0o644); err != nil {
		return nil, fmt.Errorf("write client source: %w", err)
	}
	var out []client
	for _, c := range []struct{ libc, cc string }{{"glibc", "gcc"}, {"musl", "musl-gcc"}} {
		bin := filepath.Join(dir, "gai-"+c.libc)
		argv := []string{c.cc, "-O2", "-o", bin, src}
		if c.libc == "musl" {
			argv = []string{c.cc, "-static", "-O2", "-o", bin, src}
		}
		if err := command(ctx, argv...); err != nil {
			return nil, fmt.Errorf("build the %s client: %w", c.libc, err)
		}
		out = append(out, client{libc: c.libc, path: bin})
	}
	return out, nil
}

// lookups runs c in the pod namespace for count lookups of name and
// returns each one's duration; a lookup that fails or answers anything
// but want is an error.
func (c client) lookups(ctx context.Context, tp topology, name string, count int, want string) ([]time.Duration, error) {
	argv := tp.inPod(c.path, name, strconv.Itoa(count))
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).Output()
	if err != nil {
		return nil, fmt.Errorf("%s client: %w", c.libc, err)
	}
	var ds []time.Duration
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		us, addr, _ := strings.Cut(line, " ")
		if addr != want {
			return nil, fmt.Errorf("%s client: %s answered %q, want %s", c.libc, name, addr, want)
		}
		n, err := strconv.ParseInt(us, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s client: line %q: %w", c.libc, line, err)
		}
		ds = append(ds, time.Duration(n)*time.Microsecond)
	}
	if len(ds) != count {
		return nil, fmt.Errorf("%s client: %d lookups reported, want %d", c.libc, len(ds), count)
	}
	return ds, nil
}

func median(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}
