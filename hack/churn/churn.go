// Command churn drives the real control plane binary with the churn of a
// large cluster: Services created and deleted, headless Services'
// endpoints changing, pods starting (new agents connecting with no table)
// and stopping (agents leaving), at rates taken from Kubernetes'
// published scalability thresholds (README.md). It reports the control
// plane's CPU, RSS, the ACK latency of every change at every agent, and
// what coalescing did, every interval, and checks at the end that no
// version was lost (every agent on the last one) and no agent starved.
//
//	go run ./hack/churn -agents 10000 -duration 2m
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// Config is one run. Rates are per second; the change rates are the
// whole cluster's (every replica watches every change), the pod rate is
// the cluster's, of which this replica takes 1/Replicas.
type Config struct {
	// Meshdns is the meshdns binary; its controlplane command is run.
	Meshdns string
	// Self starts a fleet process: this program (or its test binary),
	// which acts as one when fleetEnv is set.
	Self []string
	// Dir holds the run's files (entries, certificates).
	Dir string
	// Agents connected to the replica at the start (default 1,000),
	// spread over Procs fleet processes (2) and Namespaces (100), their
	// connects over Ramp (Agents/500 seconds).
	Agents, Procs, Namespaces int
	Ramp                      time.Duration
	// TLS serves mTLS, each agent with a SPIFFE certificate of its own.
	TLS bool
	// Services in the cluster (10,000), Headless of them (1,000) with
	// Endpoints each (10), HotServices (500) of them the pool that
	// ServiceRate creates and as many deletes.
	Services, Headless, Endpoints, HotServices int
	// ServiceRate: Services created a second, and as many deleted (1);
	// EndpointRate: headless endpoint changes a second (20); PodRate:
	// pods started a second in the cluster, and as many stopped (10), of
	// which this replica sees 1/Replicas (3).
	ServiceRate, EndpointRate, PodRate float64
	Replicas                           int
	// Duration of the churn (60s); Interval between report lines (5s).
	Duration, Interval time.Duration
	// Settle bounds the wait for every agent to reach the last version
	// after the churn (60s), and for the first tables (60s + 6ms/agent).
	Settle time.Duration
	// Starve is the longest an agent may go without an update while
	// changes flow (10s).
	Starve time.Duration
	// Nice runs the fleet processes at this niceness (0: none). A
	// niceness makes the simulated agents yield the cores to the control
	// plane, but on a loaded machine it starves them: they stop reading,
	// and what is measured is the replica's slow-agent path.
	Nice int
	Seed uint64
	// Out receives the report; Log the children's standard error.
	Out, Log io.Writer
}

// DefaultConfig is the model's defaults (README.md has their sources);
// the flags start from it.
func DefaultConfig() Config {
	return Config{
		Agents: 1000, Procs: 2, Namespaces: 100,
		Services: 10000, Headless: 1000, Endpoints: 10, HotServices: 500,
		ServiceRate: 1, EndpointRate: 20, PodRate: 10, Replicas: 3,
		Duration: time.Minute, Interval: 5 * time.Second, Settle: time.Minute, Starve: 10 * time.Second,
		Seed: 1,
	}
}

// check refuses a configuration the run cannot model, and fills what is
// left to the run (the ramp, the writers).
func (c *Config) check() error {
	if c.Agents <= 0 || c.Procs <= 0 || c.Namespaces <= 0 || c.Replicas <= 0 {
		return fmt.Errorf("agents, procs, namespaces and replicas must be positive: %d, %d, %d, %d",
			c.Agents, c.Procs, c.Namespaces, c.Replicas)
	}
	if c.Headless+c.HotServices > c.Services || c.Endpoints <= 0 {
		return fmt.Errorf("services %d must hold headless %d and hot services %d; endpoints %d must be positive",
			c.Services, c.Headless, c.HotServices, c.Endpoints)
	}
	if c.ServiceRate < 0 || c.EndpointRate < 0 || c.PodRate < 0 {
		return fmt.Errorf("rates must not be negative")
	}
	if c.Duration <= 0 || c.Interval <= 0 || c.Settle <= 0 || c.Starve <= 0 {
		return fmt.Errorf("duration, interval, settle and starve must be positive")
	}
	if c.Ramp <= 0 {
		c.Ramp = time.Duration(c.Agents) * 2 * time.Millisecond
	}
	if c.Out == nil {
		c.Out = os.Stdout
	}
	if c.Log == nil {
		c.Log = os.Stderr
	}
	return nil
}

// Result is a run's verdict and totals.
type Result struct {
	// Lost lists agents not on the last version once the run settled.
	Lost []int
	// Starved lists agents that went longer than Config.Starve without
	// an update while changes flowed; MaxGap is the longest gap.
	Starved []int
	MaxGap  time.Duration
	// Changes written; Versions built by the control plane.
	Changes  int
	Versions int
	// ACK latency over the run, one sample per agent and change.
	AckP50, AckP99, AckMax time.Duration
	// Joined agents (pods started during the churn) and their time to a
	// first table.
	Joined            int
	JoinP99, JoinMax  time.Duration
	DebugAgentsErrors []string
}

// OK is true when no version was lost and no agent starved.
func (r *Result) OK() bool {
	return len(r.Lost) == 0 && len(r.Starved) == 0 && len(r.DebugAgentsErrors) == 0
}

// run is one run's moving parts.
type run struct {
	cfg    Config
	cp     *controlPlane
	fleets []*fleetProc
	events chan event
	pods   chan podEvent
	writes *writeLog
	tr     *tracker
	live   []int // agents running, owned by the pod churn goroutine once it starts
	next   int   // the next agent index
}

// podEvent is an agent started or stopped by the pod churn.
type podEvent struct {
	agent int
	start bool
	at    time.Time
}

// Run runs the model once: setup, first tables, churn, settle, verdict.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.check(); err != nil {
		return nil, fmt.Errorf("churn config: %w", err)
	}
	r := &run{cfg: cfg, events: make(chan event, 1<<16), pods: make(chan podEvent, 1024), writes: newWriteLog()}
	r.tr = newTracker(r.writes)
	entries := filepath.Join(cfg.Dir, "entries")
	if err := os.MkdirAll(entries, 0o755); err != nil {
		return nil, fmt.Errorf("entries folder: %w", err)
	}
	cl, err := newCluster(entries, cfg.Seed, cfg.Services, cfg.Headless, cfg.HotServices, cfg.Endpoints)
	if err != nil {
		return nil, err
	}
	var p *pki
	pkiDir := "-"
	if cfg.TLS {
		if p, err = newPKI(cfg.Dir); err != nil {
			return nil, err
		}
		pkiDir = cfg.Dir
	}
	if r.cp, err = startControlPlane(cfg.Meshdns, entries, p, cfg.Log, cfg.Settle); err != nil {
		return nil, err
	}
	defer r.cp.stop()
	spec := fmt.Sprintf("%s %s %d", r.cp.grpc, pkiDir, cfg.Namespaces)
	for range cfg.Procs {
		fp, err := startFleet(cfg.Self, spec, cfg.Nice, r.events, cfg.Log)
		if err != nil {
			return nil, err
		}
		r.fleets = append(r.fleets, fp)
		defer fp.stop()
	}
	r.header()
	if err := r.connect(ctx); err != nil {
		return nil, err
	}
	return r.churn(ctx, cl)
}

func (r *run) fleetOf(i int) *fleetProc { return r.fleets[i%len(r.fleets)] }

// connect starts the first agents, spread over the ramp, and waits for
// each one's first table.
func (r *run) connect(ctx context.Context) error {
	start := time.Now()
	n := r.cfg.Agents
	batch := max(n/100, 1)
	for r.next < n {
		at := start.Add(r.cfg.Ramp * time.Duration(r.next) / time.Duration(n))
		waitCtx(ctx, time.Until(at))
		for k := 0; k < batch && r.next < n; k++ {
			r.tr.started(r.next, time.Now())
			if err := r.fleetOf(r.next).send('+', r.next); err != nil {
				return err
			}
			r.live = append(r.live, r.next)
			r.next++
		}
		r.drainEvents()
	}
	bound := r.cfg.Ramp + r.cfg.Settle + time.Duration(n)*6*time.Millisecond
	deadline := time.After(time.Until(start.Add(bound)))
	tick := time.NewTicker(r.cfg.Interval)
	defer tick.Stop()
	// Counting walks every agent: 10 times a second, not at every event.
	check := time.NewTicker(100 * time.Millisecond)
	defer check.Stop()
	for {
		if _, tabled := r.tr.live(); tabled == n {
			fmt.Fprintf(r.cfg.Out, "connect: %d agents had their first table after %v\n", n, time.Since(start).Round(time.Millisecond))
			return nil
		}
	events:
		for {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case e := <-r.events:
				r.tr.observe(e)
			case <-check.C:
				break events
			case <-tick.C:
				_, tabled := r.tr.live()
				fmt.Fprintf(r.cfg.Out, "connect: %d of %d agents have a table after %v\n", tabled, n, time.Since(start).Round(time.Second))
			case <-deadline:
				_, tabled := r.tr.live()
				return fmt.Errorf("first tables: %d of %d agents had one within %v", tabled, n, bound)
			}
		}
	}
}

func (r *run) drainEvents() {
	for {
		select {
		case e := <-r.events:
			r.tr.observe(e)
		default:
			return
		}
	}
}

// churn runs the changes and the pod churn for the duration, reporting
// every interval, then waits for every agent to settle and judges.
func (r *run) churn(ctx context.Context, cl *cluster) (*Result, error) {
	cctx, stop := context.WithTimeout(ctx, r.cfg.Duration)
	defer stop()
	var wg sync.WaitGroup
	errc := make(chan error, 1)
	r.tr.churnStart = time.Now()
	wg.Add(2)
	go func() { defer wg.Done(); errc <- r.changes(cctx, cl) }()
	go func() { defer wg.Done(); r.podChurn(cctx) }()
	smp := newSampler(r)
	smp.header()
	tick := time.NewTicker(r.cfg.Interval)
	defer tick.Stop()
	for cctx.Err() == nil {
		select {
		case e := <-r.events:
			r.tr.observe(e)
		case pe := <-r.pods:
			r.pod(pe)
		case <-tick.C:
			smp.line()
		case <-cctx.Done():
		}
	}
	wg.Wait()
	close(r.pods)
	for pe := range r.pods {
		r.pod(pe)
	}
	if err := <-errc; err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
		return nil, err
	}
	r.tr.endChurn(time.Now())
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return r.settle(ctx, smp)
}

func (r *run) pod(pe podEvent) {
	if pe.start {
		r.tr.started(pe.agent, pe.at)
	} else {
		r.tr.stopped(pe.agent)
	}
}

// changes writes the cluster's changes, each kind a Poisson process of
// its rate, one file write each, until ctx ends.
func (r *run) changes(ctx context.Context, cl *cluster) error {
	rnd := rand.New(rand.NewPCG(r.cfg.Seed+1, 7))
	kinds := []struct {
		rate float64
		do   func() error
	}{
		{r.cfg.ServiceRate, cl.createService},
		{r.cfg.ServiceRate, cl.deleteService},
		{r.cfg.EndpointRate, cl.endpointChange},
	}
	total := 0.0
	for _, k := range kinds {
		total += k.rate
	}
	if total <= 0 {
		<-ctx.Done()
		return nil
	}
	next := time.Now()
	for {
		next = next.Add(time.Duration(rnd.ExpFloat64() / total * float64(time.Second)))
		waitCtx(ctx, time.Until(next))
		if ctx.Err() != nil {
			return nil
		}
		pick := rnd.Float64() * total
		for _, k := range kinds {
			if pick < k.rate {
				if err := k.do(); err != nil {
					return err
				}
				break
			}
			pick -= k.rate
		}
		r.writes.add(cl.seq, time.Now())
	}
}

// podChurn starts and stops agents at this replica's share of the
// cluster's pod rate: a started pod is a new agent (a new index, a new
// address, no table), a stopped one a random running agent.
func (r *run) podChurn(ctx context.Context) {
	rate := r.cfg.PodRate / float64(r.cfg.Replicas)
	if rate <= 0 {
		<-ctx.Done()
		return
	}
	rnd := rand.New(rand.NewPCG(r.cfg.Seed+2, 11))
	next := time.Now()
	for {
		// Starts and stops are two processes of the same rate.
		next = next.Add(time.Duration(rnd.ExpFloat64() / (2 * rate) * float64(time.Second)))
		waitCtx(ctx, time.Until(next))
		if ctx.Err() != nil {
			return
		}
		if rnd.IntN(2) == 0 || len(r.live) == 0 {
			i := r.next
			r.next++
			r.live = append(r.live, i)
			r.pods <- podEvent{agent: i, start: true, at: time.Now()}
			_ = r.fleetOf(i).send('+', i)
			continue
		}
		k := rnd.IntN(len(r.live))
		i := r.live[k]
		r.live[k] = r.live[len(r.live)-1]
		r.live = r.live[:len(r.live)-1]
		r.pods <- podEvent{agent: i, at: time.Now()}
		_ = r.fleetOf(i).send('-', i)
	}
}
