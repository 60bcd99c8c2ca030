package node

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meshdns/meshdns/controlplane/webhook"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

// testExitAtStart injects new pods with a sidecar whose agent exits as it
// starts, as a bad image's would: after three quick deaths its supervisor
// answers the pod's queries itself (safe mode), forwarding them to the
// pod's resolv.conf nameserver, the cluster DNS, and keeps trying the
// agent. The queries sent before safe mode wait in the supervisor's
// sockets, so no lookup fails and none waits for its timeout.
func (b *badEnv) testExitAtStart(t *testing.T, ctx context.Context) {
	b.setTemplate(t, ctx, true)
	defer b.setTemplate(t, ctx, false)
	t0 := time.Now()
	pods := b.startFleet(t, ctx, "exits", fleetSize, false)
	defer b.deletePods(t, ctx, pods)
	end := t0.Add(beforeWindow)
	if !b.before {
		// Each pod's window: safeWindow from its application's start.
		end = time.Time{}
		for _, pod := range pods {
			testenv.Eventually(t, pod+"'s application started", 3*time.Minute, func() bool {
				return !appStart(b.n.ContainerLog(badNamespace, pod, "app")).IsZero()
			})
			if e := appStart(b.n.ContainerLog(badNamespace, pod, "app")).Add(safeWindow); e.After(end) {
				end = e
			}
		}
	}
	time.Sleep(time.Until(end))
	s := b.lookups(pods, t0, end)
	safe, exits := 0, 0
	for _, pod := range pods {
		log := b.n.ContainerLog(badNamespace, pod, webhook.AgentContainerName)
		exits += strings.Count(log, "meshdns_crashtest: "+exitAtStartEnv+" set")
		if strings.Contains(log, "safe mode: the supervisor answers") {
			safe++
		}
	}
	b.rows = append(b.rows, row{scenario: "3. agent exits at start (new pods)", stats: s, reached: "-",
		note: "pods in safe mode: " + strconv.Itoa(safe) + " of " + strconv.Itoa(len(pods)) + ", agent exits: " + strconv.Itoa(exits)})
	t.Logf("agent exiting at start: %d lookups, %d failed, the longest %v; %d of %d pods in safe mode, %d agent exits",
		s.done, s.failed, s.longest.Round(time.Millisecond), safe, len(pods), exits)
	if b.before {
		return
	}
	if safe != len(pods) || exits < 3*len(pods) {
		t.Errorf("%d of %d pods in safe mode after %d agent exits: the test proves nothing", safe, len(pods), exits)
	}
	if s.done < len(pods) || s.failed > 0 {
		t.Errorf("%d of %d lookups failed with an agent that exits at start, want none: %v", s.failed, s.done, s.fails)
		for _, pod := range pods {
			t.Logf("%s's sidecar:\n%s", pod, b.n.ContainerLog(badNamespace, pod, webhook.AgentContainerName))
		}
	}
	if s.longest >= lookupTimeout {
		t.Errorf("a lookup took %v, want under the application's timeout %v", s.longest.Round(time.Millisecond), lookupTimeout)
	}
}

// testControlPlaneGone kills every control plane replica serving the
// pods (SIGKILL, as a node failure would) and starts it again with the
// same arguments after outage. The agents keep answering from their
// tables meanwhile, then reconnect. The restarted control plane serves
// what follows; parent's cleanup stops it.
func (b *badEnv) testControlPlaneGone(t, parent *testing.T, ctx context.Context, pods []string) {
	b.waitInSync(t, pods)
	pid, args := controlPlaneProcess(t, b.env)
	t0 := time.Now()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitGone(t, pid)
	time.Sleep(time.Until(t0.Add(outage)))
	runControlPlane(t, parent, "controlplane-back", b.meshdns, filepath.Join(b.dir, "controlplane-back.log"), b.adminAddr, args)
	b.waitInSync(t, pods)
	end := b.waitResolving(t, pods, time.Now())
	b.judgeOutage(t, "4. every control plane replica gone", pods, t0, end)
}

// testAPIServerGone stops the API server (SIGSTOP: it holds its
// connections and answers nothing, harder on its clients than a refusal)
// for outage, then resumes it. Nothing on a query's path needs it.
func (b *badEnv) testAPIServerGone(t *testing.T, ctx context.Context, pods []string) {
	b.waitInSync(t, pods)
	pid := b.c.APIServerPID()
	resume := func() { _ = syscall.Kill(pid, syscall.SIGCONT) }
	t.Cleanup(resume)
	t0 := time.Now()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(outage)
	resume()
	testenv.Eventually(t, "the API server answering", 2*time.Minute, func() bool {
		_, err := b.c.Client.Discovery().ServerVersion()
		return err == nil
	})
	b.waitInSync(t, pods)
	end := b.waitResolving(t, pods, time.Now())
	b.judgeOutage(t, "5. API server gone", pods, t0, end)
}

// judgeOutage reports an outage of a part no query needs and, with the
// protections on, checks that no lookup failed or waited for its timeout.
func (b *badEnv) judgeOutage(t *testing.T, scenario string, pods []string, t0, end time.Time) {
	t.Helper()
	s := b.lookups(pods, t0, end)
	b.rows = append(b.rows, row{scenario: scenario, stats: s, reached: "-",
		note: "away " + outage.String() + ", back in sync " + end.Sub(t0).Round(time.Second).String() + " after it left"})
	t.Logf("%s for %v: %d lookups, %d failed, the longest %v", scenario, outage, s.done, s.failed, s.longest.Round(time.Millisecond))
	if b.before {
		return
	}
	if s.done == 0 || s.failed > 0 {
		t.Errorf("%d of %d lookups failed, want none: %v", s.failed, s.done, s.fails)
	}
	if s.longest >= lookupTimeout {
		t.Errorf("a lookup took %v, want under the application's timeout %v", s.longest.Round(time.Millisecond), lookupTimeout)
	}
}
