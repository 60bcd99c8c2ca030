package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"time"
)

// header prints what the run models.
func (r *run) header() {
	c := r.cfg
	var lim syscall.Rlimit
	_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)
	load, _ := os.ReadFile("/proc/loadavg")
	mode := "plaintext"
	if c.TLS {
		mode = "mTLS (SPIFFE, a certificate per agent)"
	}
	fmt.Fprintf(c.Out, "churn: %s, %d agents in %d fleet processes (nice %d) over %d namespaces, %d cores, nofile %d, load %s\n",
		mode, c.Agents, c.Procs, c.Nice, c.Namespaces, runtime.NumCPU(), lim.Cur, strings.Join(strings.Fields(string(load))[:3], " "))
	fmt.Fprintf(c.Out, "cluster: %d Services, %d headless of %d endpoints; per second: %.1f Services created and %.1f deleted, "+
		"%.1f endpoint changes, %.1f pods started and %.1f stopped (this replica's 1/%d: %.2f each); %v of churn\n",
		c.Services, c.Headless, c.Endpoints, c.ServiceRate, c.ServiceRate, c.EndpointRate, c.PodRate, c.PodRate,
		c.Replicas, c.PodRate/float64(c.Replicas), c.Duration)
}

// sampler prints a line every interval from the control plane's /proc
// and /metrics and the tracker.
type sampler struct {
	r        *run
	t0, at   time.Time
	cp       procSample
	fleet    time.Duration
	m        map[string]float64
	seq      int
	peakRSS  int64
	peakCPU  float64
	versions float64
	// responses sent over the run, deltas and full tables.
	deltas, fulls float64
	cpuStart      time.Duration
}

func newSampler(r *run) *sampler {
	s := &sampler{r: r, t0: time.Now(), at: time.Now()}
	s.cp, _ = readProc(r.cp.pid())
	s.cpuStart = s.cp.cpu
	s.fleet = s.fleetCPU()
	s.m, _ = r.cp.metrics()
	s.seq = r.writes.last()
	return s
}

func (s *sampler) fleetCPU() (d time.Duration) {
	for _, f := range s.r.fleets {
		if p, err := readProc(f.cmd.Process.Pid); err == nil {
			d += p.cpu
		}
	}
	return d
}

func (s *sampler) header() {
	fmt.Fprintln(s.r.cfg.Out, "     t  agents  cp-cpu  rss-MiB heap-MiB changes reloads versions ch/ver  deltas  fulls ch/resp ver/resp holds "+
		"ack-p50 ack-p99 ack-max joins join-p99 fleet-cpu unread")
}

// line prints the interval since the last line.
func (s *sampler) line() {
	now := time.Now()
	dt := now.Sub(s.at).Seconds()
	cp, err := readProc(s.r.cp.pid())
	if err != nil {
		fmt.Fprintf(s.r.cfg.Out, "sample: %v\n", err)
		return
	}
	m, err := s.r.cp.metrics()
	if err != nil {
		fmt.Fprintf(s.r.cfg.Out, "sample: %v\n", err)
		return
	}
	fleet := s.fleetCPU()
	seq := s.r.writes.last()
	ack, join, responses, jumped := s.r.tr.interval()
	d := func(n string) float64 { return m[n] - s.m[n] }
	cpu := 100 * (cp.cpu - s.cp.cpu).Seconds() / dt
	versions := d(mVersions)
	live, _ := s.r.tr.live()
	fmt.Fprintf(s.r.cfg.Out, "%6.0f %7d %6.0f%% %8.0f %8.0f %7d %7.0f %8.0f %6s %7.0f %6.0f %7s %8s %5.0f %7s %7s %7s %5d %8s %8.0f%% %6d\n",
		now.Sub(s.t0).Seconds(), live, cpu, float64(cp.rss)/(1<<20), m[mHeap]/(1<<20), seq-s.seq, d(mReloads), versions,
		ratio(float64(seq-s.seq), versions), d(mDeltas), d(mFulls), ratio(float64(jumped), float64(responses)),
		ratio(versions*float64(live), d(mDeltas)), d(mHolds), ms(ack.quantile(0.5)), ms(ack.quantile(0.99)), ms(ack.max),
		join.n, ms(join.quantile(0.99)), 100*(fleet-s.fleet).Seconds()/dt, len(s.r.events))
	s.peakRSS = max(s.peakRSS, cp.rss)
	s.peakCPU = max(s.peakCPU, cpu)
	s.versions += versions
	s.deltas += d(mDeltas)
	s.fulls += d(mFulls)
	s.at, s.cp, s.m, s.fleet, s.seq = now, cp, m, fleet, seq
}

// starveBound is the gap over which an agent counts as starved: the
// configured bound, or three times the median agent's longest gap when
// that is more. A replica short of CPU makes every agent wait (the ACK
// latency shows it); starving is one agent waiting while the others are
// served, which a machine's load alone does not cause.
func starveBound(starve, median time.Duration) time.Duration {
	return max(starve, 3*median)
}

func ratio(a, b float64) string {
	if b <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", a/b)
}

func ms(d time.Duration) string { return fmt.Sprintf("%d", d.Milliseconds()) }

// settle waits, after the churn, until every running agent holds the
// last change or the bound passes, then judges the run.
func (r *run) settle(ctx context.Context, smp *sampler) (*Result, error) {
	last := r.writes.last()
	start := time.Now()
	deadline := time.NewTimer(r.cfg.Settle)
	defer deadline.Stop()
	tick := time.NewTicker(r.cfg.Interval)
	defer tick.Stop()
	res := &Result{Changes: last}
	r.learnCurrent()
	// Counting the agents behind walks them all: 10 times a second, not
	// at every event.
	check := time.NewTicker(100 * time.Millisecond)
	defer check.Stop()
	behind, asked := len(r.tr.behind(last)), 0
wait:
	for behind > 0 {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case e := <-r.events:
			r.tr.observe(e)
		case <-check.C:
			behind = len(r.tr.behind(last))
		case <-tick.C:
			smp.line()
			// Only agents on a version of unknown change need the
			// control plane's view, and asking costs a starved replica
			// a whole table's encoding: at most every third line.
			if asked++; asked%3 == 0 && r.tr.unknownBehind() > 0 {
				r.learnCurrent()
			}
		case <-deadline.C:
			break wait
		}
	}
	took := time.Since(start)
	smp.line()
	res.Lost = r.tr.behind(last)
	if len(res.Lost) > 0 {
		// Say whose view differs: the control plane's (its current
		// version lacks the last change) or the tool's (events of the
		// agents not read yet).
		v, seq := r.learnCurrent()
		fmt.Fprintf(r.cfg.Out, "control plane: current version %s holds change %d; %d agent events not read yet\n", v, seq, len(r.events))
	}
	res.DebugAgentsErrors = r.checkDebugAgents(ctx, start)
	r.verdict(res, smp, last, took)
	return res, nil
}

// learnCurrent asks the control plane which change its current version
// holds, through the view of an agent /debug/agents lists as connected
// (an agent the tool runs may be between two streams), so agents that
// reached it by a full table count as on it.
func (r *run) learnCurrent() (version string, seq int) {
	agents, err := r.cp.agents()
	if err != nil {
		return "", -1
	}
	for k, a := range agents {
		if k == 3 {
			break
		}
		if v, seq, err := r.cp.current(a.Namespace, a.Pod); err == nil {
			r.tr.verSeq[v] = seq
			return v, seq
		}
	}
	return "", -1
}

// checkDebugAgents asks the control plane which agents it holds: as many
// as run, each having ACKed its view's version. A stream closed a moment
// ago may still be listed, so it asks again until the settle bound.
func (r *run) checkDebugAgents(ctx context.Context, since time.Time) []string {
	live, _ := r.tr.live()
	var errs []string
	for {
		errs = errs[:0]
		agents, err := r.cp.agents()
		if err != nil {
			errs = append(errs, err.Error())
		} else {
			var stale, stopped []string
			for _, a := range agents {
				if a.Acked != a.View {
					stale = append(stale, a.String())
				}
				var i int
				if _, err := fmt.Sscanf(a.Pod, "pod-%d", &i); err == nil && r.tr.agents[i] != nil && r.tr.agents[i].gone {
					stopped = append(stopped, a.String())
				}
			}
			if len(stopped) > 0 {
				errs = append(errs, fmt.Sprintf("/debug/agents lists %d agents that were stopped, first %s",
					len(stopped), strings.Join(stopped[:min(len(stopped), 5)], "; ")))
			}
			if len(agents) != live {
				errs = append(errs, fmt.Sprintf("/debug/agents lists %d agents, %d run", len(agents), live))
			}
			if len(stale) > 0 {
				errs = append(errs, fmt.Sprintf("/debug/agents: %d agents have not ACKed their view's version, first %s",
					len(stale), strings.Join(stale[:min(len(stale), 5)], "; ")))
			}
		}
		if len(errs) == 0 || time.Since(since) > r.cfg.Settle || ctx.Err() != nil {
			return errs
		}
		waitCtx(ctx, time.Second)
	}
}

// verdict fills the totals and prints the summary.
func (r *run) verdict(res *Result, smp *sampler, last int, took time.Duration) {
	out := r.cfg.Out
	tr := r.tr
	ack, join := tr.ackTotal, tr.joinTotal
	res.AckP50, res.AckP99, res.AckMax = ack.quantile(0.5), ack.quantile(0.99), ack.max
	res.JoinP99, res.JoinMax, res.Joined = join.quantile(0.99), join.max, int(join.n)
	res.Versions = int(smp.versions)
	tr.closeGaps()
	g50, g99, gmax, worst := tr.gaps()
	res.MaxGap = gmax
	bound := starveBound(r.cfg.Starve, g50)
	for i, a := range tr.agents {
		if !a.gone && !a.first.IsZero() && a.maxGap > bound {
			res.Starved = append(res.Starved, i)
		}
	}
	sort.Ints(res.Starved)
	live, _ := tr.live()
	churn := tr.churnEnd.Sub(tr.churnStart)
	cpu := (smp.cp.cpu - smp.cpuStart).Seconds() / time.Since(smp.t0).Seconds() * 100
	fmt.Fprintf(out, "changes: %d in %v (%.1f/s) became %d versions (%s changes each)\n", last, churn.Round(time.Millisecond),
		float64(last)/churn.Seconds(), res.Versions, ratio(float64(last), smp.versions))
	fmt.Fprintf(out, "ack latency, change written to the agent's ACK (%d samples): p50 %v p99 %v max %v; %d updates of unknown span\n",
		ack.n, res.AckP50, res.AckP99, res.AckMax.Round(time.Millisecond), tr.unresolved)
	fmt.Fprintf(out, "pods started during the churn: %d, start to first table p50 %v p99 %v max %v\n", res.Joined,
		join.quantile(0.5), res.JoinP99, res.JoinMax.Round(time.Millisecond))
	fmt.Fprintf(out, "longest time without an update while changes flowed, per agent: p50 %v p99 %v max %v (agent %d); over %v: %d agents\n",
		g50.Round(time.Millisecond), g99.Round(time.Millisecond), gmax.Round(time.Millisecond), worst, bound, len(res.Starved))
	fmt.Fprintf(out, "after the churn: %d of %d running agents not on the last change (%d) after %v\n", len(res.Lost), live, last,
		took.Round(time.Millisecond))
	if m, err := r.cp.metrics(); err == nil {
		fmt.Fprintf(out, "streams: %.0f connected, %.0f waiting for admission; ended since the start: %.0f ok (agents that left), %.0f with an error\n",
			m[mConnected], m[mWaiting], m[mStreamsOK], m[mStreamsErr])
	}
	for _, e := range res.DebugAgentsErrors {
		fmt.Fprintf(out, "control plane: %s\n", e)
	}
	cpuTime := (smp.cp.cpu - smp.cpuStart).Seconds()
	fmt.Fprintf(out, "control plane: cpu %.0f%% mean, %.0f%% peak interval (%.1f s); rss peak %.0f MiB; %.0f deltas and %.0f full tables sent, %.1f µs of cpu per response\n",
		cpu, smp.peakCPU, cpuTime, float64(smp.peakRSS)/(1<<20), smp.deltas, smp.fulls, 1e6*cpuTime/max(smp.deltas+smp.fulls, 1))
	verdict := "PASS: no version lost, no agent starved"
	if !res.OK() {
		verdict = fmt.Sprintf("FAIL: %d agents lost the last version, %d starved", len(res.Lost), len(res.Starved))
	}
	fmt.Fprintln(out, verdict)
}
