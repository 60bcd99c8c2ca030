package node

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshdns/meshdns/controlplane/webhook"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

const (
	// outage is how long every control plane replica (ControlPlaneGone)
	// and the API server (APIServerGone) stay away.
	outage = 60 * time.Second
	// fleetSize is how many application pods run through each scenario.
	fleetSize = 3
	// quarantineMinAgents is the control plane's --quarantine-min-agents,
	// below fleetSize so that the staged rollout shows: a new version goes
	// to this many canaries, the others only once every canary ACKed it.
	quarantineMinAgents = 2
	// lateAgents are the pods created once the poisoned version is
	// quarantined: agents that connect afterwards.
	lateAgents = 2
	// safeWindow is how long the pods of a sidecar whose agent exits at
	// start are watched: the supervisor tries the agent again 0.8, 2.4,
	// 5.6 and 12 s after entering safe mode, each try stopping its reads.
	safeWindow = 15 * time.Second
	// beforeEnv runs the scenarios with the protections off and only
	// reports (README "Before and after").
	beforeEnv = "MESHDNS_BADVERSION_BEFORE"
	// beforeWindow is how long a scenario is watched with the protections
	// off, when no event ends it.
	beforeWindow = 60 * time.Second
)

// badEnv is TestBadVersion's node: the setup's control plane reads an
// entries file too (where the poisoned name goes), and the sidecar's
// binary is built with the crash-test tag.
type badEnv struct {
	*env
	before  bool   // the protections off (beforeEnv)
	entries string // the control plane's entries file
	want    string // the application's answer: "ok <the Service's ClusterIP>"
	rows    []row
}

// TestBadVersion: a bad version never takes a fleet's DNS down. Pods whose
// application resolves a Service every 20 ms live through a version that
// crashes the agent as it applies it (sent to running agents, then while
// the control plane restarts), a sidecar whose agent exits at start, every
// control plane replica gone for a minute, and the API server gone for a
// minute. Each scenario reports the lookups done, failed and the longest.
func TestBadVersion(t *testing.T) {
	b := &badEnv{before: os.Getenv(beforeEnv) != ""}
	minAgents := quarantineMinAgents
	if b.before {
		minAgents = 1 << 30 // never reached: no quarantine
	}
	dir := t.TempDir()
	b.entries = filepath.Join(dir, "entries.yaml")
	b.writeEntries(t, false)
	b.env = setupWith(t, setupOptions{
		agentFlags:       []string{"-tags", "meshdns_crashtest"},
		controlPlaneArgs: []string{"--entries", b.entries, "--quarantine-min-agents", strconv.Itoa(minAgents)},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	b.createNamespace(t, ctx, badNamespace, map[string]string{"meshdns.io/inject": "enabled", "pod-security.kubernetes.io/enforce": "privileged"})
	svc, err := b.c.Client.CoreV1().Services(badNamespace).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: webName},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b.want = "ok " + svc.Spec.ClusterIP
	// The stand-in answers the Service as a cluster DNS does, so a pod
	// in safe mode, forwarding to it, resolves the name too.
	b.standIn.answer(webName+"."+badNamespace+".svc.cluster.local.", svc.Spec.ClusterIP)
	b.setTemplate(t, ctx, false)

	t.Run("PoisonedVersion", func(t *testing.T) { b.testPoisoned(t, ctx) })
	t.Run("PoisonedVersionAcrossRestart", func(st *testing.T) { b.testPoisonedAcrossRestart(st, t, ctx) })
	t.Run("AgentExitsAtStart", func(t *testing.T) { b.testExitAtStart(t, ctx) })
	steady := b.startFleet(t, ctx, "steady", fleetSize, true)
	t.Run("ControlPlaneGone", func(st *testing.T) { b.testControlPlaneGone(st, t, ctx, steady) })
	t.Run("APIServerGone", func(t *testing.T) { b.testAPIServerGone(t, ctx, steady) })

	mode := "after (today's protections)"
	if b.before {
		mode = "before (" + beforeEnv + ": --probation 0, supervise: false, no quarantine)"
	}
	lines := []string{"| scenario | lookups | failed | longest | poisoned version reached | note |", "|---|---|---|---|---|---|"}
	for _, r := range b.rows {
		lines = append(lines, r.String())
	}
	t.Logf("%s, %d pods at 1 lookup per 20 ms:\n%s", mode, fleetSize, strings.Join(lines, "\n"))
}

// writeEntries replaces the control plane's entries file at once, with
// the name that crashes a crash-test agent when poison.
func (b *badEnv) writeEntries(t *testing.T, poison bool) {
	t.Helper()
	text := "entries:\n  - hostname: good.meshdns.test\n    addresses: [\"192.0.2.10\"]\n"
	if poison {
		text += "  - hostname: crash-on-apply.meshdns.test\n    addresses: [\"192.0.2.66\"]\n"
	}
	tmp := b.entries + ".tmp"
	if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, b.entries); err != nil {
		t.Fatal(err)
	}
}

// setTemplate writes the injection template (the protections off in the
// before run; the agent exiting at start with exitAtStart) and waits until
// the webhook injects by it.
func (b *badEnv) setTemplate(t *testing.T, ctx context.Context, exitAtStart bool) {
	t.Helper()
	text := templateText(b.grpcAddr)
	if b.before {
		text += "supervise: false\nagentArgs: [\"--probation=0\"]\n"
	}
	if exitAtStart {
		text += "agentEnv: [{name: " + exitAtStartEnv + ", value: \"1\"}]\n"
	}
	if err := os.WriteFile(b.template, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "the webhook injecting by the new template", time.Minute, func() bool {
		p, err := b.c.Client.CoreV1().Pods(badNamespace).Create(ctx, appPod("dry-run", nil), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return false
		}
		for _, c := range p.Spec.InitContainers {
			if c.Name == webhook.AgentContainerName {
				exits := slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == exitAtStartEnv })
				return exits == exitAtStart && slices.Contains(c.Args, "--supervise") != b.before
			}
		}
		return false
	})
}

// testPoisoned sends the fleet, each agent on a version past its
// probation, a version that crashes the agent as it applies it. Each
// agent dies once: its supervisor restarts it on the same sockets, it
// restores its last good version and reports the poisoned one, which the
// control plane quarantines once quarantineMinAgents reported it. Pods
// created afterwards get the last good version and never crash.
func (b *badEnv) testPoisoned(t *testing.T, ctx context.Context) {
	pods := b.startFleet(t, ctx, "poison", fleetSize, true)
	b.waitProven(t, ctx, pods)
	b.waitInSync(t, pods)
	good := b.acked(t, pods)
	t0 := time.Now()
	b.writeEntries(t, true)
	var q quarantineRecord
	if b.before {
		time.Sleep(beforeWindow / 2)
	} else {
		q = b.waitQuarantined(t)
	}
	late := b.startFleet(t, ctx, "poison-late", lateAgents, !b.before)
	all := append(slices.Clone(pods), late...)
	end := b.endPoisoned(t, ctx, pods, good, t0)
	if !b.before {
		for _, pod := range late {
			testenv.Eventually(t, pod+", created after the quarantine, acknowledging the last good version "+good[pods[0]], time.Minute, func() bool {
				return agentOf(t, b.adminAddr, badNamespace, pod).Acked == good[pods[0]]
			})
		}
	}
	b.judgePoisoned(t, ctx, "1. poisoned version", all, t0, end, q.Version)
	b.writeEntries(t, false)
	b.deletePods(t, ctx, all)
}

// endPoisoned waits until the fleet came through the poisoned version
// (each agent back on its last good version, connected, and every pod
// resolving; in the before run, beforeWindow after t0) and returns when.
func (b *badEnv) endPoisoned(t *testing.T, ctx context.Context, pods []string, good map[string]string, t0 time.Time) time.Time {
	t.Helper()
	if b.before {
		time.Sleep(time.Until(t0.Add(beforeWindow)))
		return time.Now()
	}
	// A canary is back once it ACKed its last good version after its
	// report; an agent the rollout held was sent nothing new (on a new
	// stream, it holds what it reported).
	testenv.Eventually(t, "every agent on its last good version", 3*time.Minute, func() bool {
		for _, pod := range pods {
			a := agentOf(t, b.adminAddr, badNamespace, pod)
			if a.Acked != good[pod] && (a.Acked != "" || a.Sent != good[pod]) {
				return false
			}
		}
		return true
	})
	return b.waitResolving(t, pods, time.Now())
}

// judgePoisoned reports a poisoned version's scenario and, with the
// protections on, checks its bounds: each agent crashed at most once (it
// rejects the version after), at most the quarantine threshold of agents
// were reached, each crash failed at most the one lookup the dying agent
// held, and no lookup took longer than the application's timeout and the
// pause after it.
func (b *badEnv) judgePoisoned(t *testing.T, ctx context.Context, scenario string, pods []string, t0, end time.Time, version string) {
	t.Helper()
	s := b.lookups(pods, t0, end)
	reached, crashes := 0, 0
	var per []string
	for _, pod := range pods {
		n := b.crashes(t, ctx, pod)
		crashes += n
		if n > 0 {
			reached++
		}
		per = append(per, pod+": "+strconv.Itoa(n))
		if !b.before && n > 1 {
			t.Errorf("%s: the agent crashed %d times on the poisoned version, want at most once", pod, n)
		}
	}
	b.rows = append(b.rows, row{scenario: scenario, stats: s, reached: strconv.Itoa(reached) + " of " + strconv.Itoa(len(pods)),
		note: strconv.Itoa(crashes) + " agent crashes over " + end.Sub(t0).Round(time.Second).String()})
	if version != "" {
		scenario += " (" + version + ")"
	}
	t.Logf("%s: %d lookups, %d failed, the longest %v; crashes per pod: %s", scenario, s.done, s.failed,
		s.longest.Round(time.Millisecond), strings.Join(per, ", "))
	if b.before {
		return
	}
	if reached > quarantineMinAgents {
		t.Errorf("the poisoned version reached %d agents, more than the quarantine threshold %d", reached, quarantineMinAgents)
	}
	if s.done == 0 || s.failed > crashes {
		t.Errorf("%d of %d lookups failed across %d agent crashes, want at most one per crash: %v", s.failed, s.done, crashes, s.fails)
	}
	if s.longest > lookupTimeout+time.Second {
		t.Errorf("a lookup took %v, want under the application's timeout %v and a second", s.longest.Round(time.Millisecond), lookupTimeout)
	}
}

// testPoisonedAcrossRestart restarts the control plane (SIGTERM, then the
// same arguments, as a rolling update does) with the poisoned name in its
// entries, so the version arrives as the restarted replica's first: the
// running agents get it as they reconnect, each dies once, restores its
// last good version and reports it. A replica's first version cannot be
// held back (no version before it), so no pod joins afterwards. The
// restarted control plane serves the scenarios after it; parent's cleanup
// stops it.
func (b *badEnv) testPoisonedAcrossRestart(t, parent *testing.T, ctx context.Context) {
	pods := b.startFleet(t, ctx, "restart", fleetSize, true)
	b.waitProven(t, ctx, pods)
	b.waitInSync(t, pods)
	good := b.acked(t, pods)
	pid, args := controlPlaneProcess(t, b.env)
	t0 := time.Now()
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitGone(t, pid)
	b.writeEntries(t, true)
	runControlPlane(t, parent, "controlplane-restarted", b.meshdns, filepath.Join(b.dir, "controlplane-restarted.log"), b.adminAddr, args)
	var q quarantineRecord
	if !b.before {
		q = b.waitQuarantined(t)
	}
	end := b.endPoisoned(t, ctx, pods, good, t0)
	b.judgePoisoned(t, ctx, "2. poisoned version as the control plane restarts", pods, t0, end, q.Version)
	b.writeEntries(t, false)
	b.deletePods(t, ctx, pods)
}

// waitQuarantined waits until the control plane quarantined a version.
func (b *badEnv) waitQuarantined(t *testing.T) quarantineRecord {
	t.Helper()
	var q quarantineRecord
	testenv.Eventually(t, "the poisoned version quarantined", 3*time.Minute, func() bool {
		q = b.quarantined(t)
		return q.Quarantined
	})
	return q
}

// waitGone waits until the process pid is gone.
func waitGone(t *testing.T, pid int) {
	t.Helper()
	testenv.Eventually(t, "process "+strconv.Itoa(pid)+" gone", 30*time.Second, func() bool {
		_, err := os.Stat("/proc/" + strconv.Itoa(pid))
		return os.IsNotExist(err)
	})
}
