package main

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// setup is how the pod reaches the cluster DNS.
type setup struct {
	name      string
	agent     bool
	cacheSize int // the agent's --cache-size; negative: no cache
}

var setups = []setup{
	{name: "without meshdns"},
	{name: "meshdns, cache off", agent: true, cacheSize: -1},
	{name: "meshdns", agent: true, cacheSize: 10000},
}

// row is one setup's figures for one client.
type row struct {
	setup, libc   string
	firstQueries  int           // queries reaching CoreDNS for the first lookup
	first         time.Duration // its time to the answer
	queriesPerRun float64       // queries reaching CoreDNS per lookup, over the next count lookups
	median        time.Duration // their median time to the answer
}

type measurer struct {
	tp      topology
	dns     *coreDNS
	cfg     config
	markers int // markers asked so far
}

// setup measures every client through s: a first lookup, then count more.
func (m *measurer) setup(ctx context.Context, s setup, clients []client, meshdns, dir string) ([]row, error) {
	nameserver := dnsIP
	if s.agent {
		nameserver = "127.0.0.1"
	}
	if err := m.tp.writeResolv(nameserver); err != nil {
		return nil, fmt.Errorf("write the pod's resolv.conf: %w", err)
	}
	var rows []row
	for _, c := range clients {
		if s.agent {
			// A fresh agent per client: each client's first lookup finds
			// an empty cache.
			a, err := startAgent(ctx, m.tp, meshdns, m.cfg.table, dir, s.cacheSize)
			if err != nil {
				return nil, err
			}
			r, err := m.client(ctx, c)
			a.stop()
			if err != nil {
				return nil, err
			}
			rows = append(rows, r)
			continue
		}
		r, err := m.client(ctx, c)
		if err != nil {
			return nil, err
		}
		rows = append(rows, r)
	}
	for i := range rows {
		rows[i].setup = s.name
	}
	return rows, nil
}

func (m *measurer) client(ctx context.Context, c client) (row, error) {
	first, firstQ, err := m.measure(ctx, c, 1)
	if err != nil {
		return row{}, err
	}
	rest, restQ, err := m.measure(ctx, c, m.cfg.count)
	if err != nil {
		return row{}, err
	}
	return row{
		libc: c.libc, firstQueries: firstQ, first: first[0],
		queriesPerRun: float64(restQ) / float64(m.cfg.count), median: median(rest),
	}, nil
}

// measure runs count lookups with c and counts the queries CoreDNS logged
// meanwhile: those before a marker asked after the lookups, less the
// marker's own.
func (m *measurer) measure(ctx context.Context, c client, count int) ([]time.Duration, int, error) {
	before := m.dns.count()
	ds, err := c.lookups(ctx, m.tp, m.cfg.name, count, outsideIP)
	if err != nil {
		return nil, 0, err
	}
	if err := m.mark(ctx, 5*time.Second); err != nil {
		return nil, 0, err
	}
	return ds, m.dns.count() - before - 1, nil
}

// mark asks CoreDNS, through the hop, for a new marker name and waits up
// to wait for its log line.
func (m *measurer) mark(ctx context.Context, wait time.Duration) error {
	m.markers++
	marker := fmt.Sprintf("marker-%d.example.com.", m.markers)
	argv := m.tp.inPod("dig", "+tries=1", fmt.Sprintf("+time=%d", max(1, int(wait/time.Second))), "@"+dnsIP, marker, "A")
	if out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput(); err != nil {
		return fmt.Errorf("ask marker %s: %w: %s", marker, err, strings.TrimSpace(string(out)))
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	return m.dns.waitFor(wctx, marker)
}

// waitServing asks markers until one reaches CoreDNS through the relay:
// both are then listening, and no lookup measured meets a closed port.
func (m *measurer) waitServing(ctx context.Context) error {
	for {
		err := m.mark(ctx, time.Second)
		if err == nil || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster DNS not serving: %w (last: %v)", ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
