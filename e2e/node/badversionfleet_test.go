package node

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshdns/meshdns/controlplane/webhook"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

// The fleet of TestBadVersion: injected pods in badNamespace whose
// application resolves the Service webName every 20 ms, what each pod's
// sidecar did, and the lookups' figures over a window.

const (
	badNamespace = "bv"
	webName      = "web"
	// lookupTimeout is testapp's deadline for one lookup.
	lookupTimeout = 3 * time.Second
	// lookupEvery is the application's pause between two lookups.
	lookupEvery = 20 * time.Millisecond
	// crashLine starts the line a crash-test agent's panic writes
	// (agent/discovery/crashtest.go).
	crashLine = "panic: meshdns_crashtest: version "
	// exitAtStartEnv is agent/discovery.ExitAtStartEnv, compiled only
	// with the crash-test tag: the agent processes of a sidecar with it
	// set exit as they start, as from a bad image.
	exitAtStartEnv = "MESHDNS_CRASHTEST_EXIT_AT_START"
)

// startFleet creates n application pods named prefix-0...; with wait, it
// returns once each resolved the Service through its agent.
func (b *badEnv) startFleet(t *testing.T, ctx context.Context, prefix string, n int, wait bool) []string {
	t.Helper()
	var pods []string
	for i := range n {
		name := prefix + "-" + strconv.Itoa(i)
		p := appPod(name, nil)
		p.Spec.Containers[0].Args = []string{"-every", lookupEvery.String(), webName}
		if _, err := b.c.Client.CoreV1().Pods(badNamespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		pods = append(pods, name)
	}
	if wait {
		b.waitResolving(t, pods, time.Now().Add(-time.Hour))
	}
	return pods
}

// waitResolving waits until every pod's application got the Service's
// address after since, and returns the latest of those times.
func (b *badEnv) waitResolving(t *testing.T, pods []string, since time.Time) time.Time {
	t.Helper()
	var last time.Time
	for _, pod := range pods {
		var at time.Time
		testenv.Eventually(t, pod+" resolving "+webName, 3*time.Minute, func() bool {
			for _, r := range b.results(badNamespace, pod) {
				if r.at.After(since) && r.out == b.want {
					at = r.at
					return true
				}
			}
			return false
		})
		if at.After(last) {
			last = at
		}
	}
	return last
}

func (b *badEnv) deletePods(t *testing.T, ctx context.Context, pods []string) {
	t.Helper()
	for _, pod := range pods {
		if err := b.c.Client.CoreV1().Pods(badNamespace).Delete(ctx, pod, metav1.DeleteOptions{}); err != nil {
			t.Errorf("delete %s: %v", pod, err)
		}
	}
}

// sidecar returns the status of a pod's agent container.
func (b *badEnv) sidecar(t *testing.T, ctx context.Context, pod string) corev1.ContainerStatus {
	t.Helper()
	p, err := b.c.Client.CoreV1().Pods(badNamespace).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range p.Status.InitContainerStatuses {
		if s.Name == webhook.AgentContainerName {
			return s
		}
	}
	return corev1.ContainerStatus{}
}

// waitProven waits until each pod's agent holds a version past its
// probation: the state file is in its state volume and no probation
// marker beside it (agent/discovery/probation.go), read through one of
// the sidecar's processes (they share its root). Only then is a version
// the last known good a crash falls back to.
func (b *badEnv) waitProven(t *testing.T, ctx context.Context, pods []string) {
	t.Helper()
	for _, pod := range pods {
		testenv.Eventually(t, pod+"'s table past its probation", 2*time.Minute, func() bool {
			s := b.sidecar(t, ctx, pod)
			if s.ContainerID == "" || s.State.Running == nil {
				return false
			}
			pids, err := b.n.ContainerPIDs(s.ContainerID)
			if err != nil || len(pids) == 0 {
				return false
			}
			dir := fmt.Sprintf("/proc/%d/root/var/run/meshdns", slices.Min(pids))
			_, errState := os.Stat(filepath.Join(dir, "nametable.pb"))
			_, errMarker := os.Stat(filepath.Join(dir, "probation.json"))
			return errState == nil && os.IsNotExist(errMarker)
		})
	}
}

// crashes counts how often a pod's agent died of the poisoned version:
// the panic lines in the sidecar's log (all its runs the kubelet keeps),
// or the kubelet's restarts of it when more (an unsupervised sidecar).
func (b *badEnv) crashes(t *testing.T, ctx context.Context, pod string) int {
	t.Helper()
	n := strings.Count(b.n.ContainerLog(badNamespace, pod, webhook.AgentContainerName), crashLine)
	return max(n, int(b.sidecar(t, ctx, pod).RestartCount))
}

// acked returns the version each pod's agent acknowledged last on the
// control plane.
func (b *badEnv) acked(t *testing.T, pods []string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, pod := range pods {
		out[pod] = agentOf(t, b.adminAddr, badNamespace, pod).Acked
	}
	return out
}

// waitInSync waits until every pod's agent is connected to the control
// plane and acknowledged the version it was sent last.
func (b *badEnv) waitInSync(t *testing.T, pods []string) {
	t.Helper()
	testenv.Eventually(t, "every agent in sync with the control plane", 3*time.Minute, func() bool {
		for _, pod := range pods {
			if a := agentOf(t, b.adminAddr, badNamespace, pod); a.Acked == "" || a.Acked != a.View {
				return false
			}
		}
		return true
	})
}

// quarantineRecord is the part of /debug/quarantine the test reads.
type quarantineRecord struct {
	Namespace   string
	Version     string
	Reports     int
	Threshold   int
	Quarantined bool
	HeldAt      string
}

// quarantined returns the control plane's record of the fleet's view,
// the zero record when it has none.
func (b *badEnv) quarantined(t *testing.T) quarantineRecord {
	t.Helper()
	var all []quarantineRecord
	if err := json.Unmarshal(get(t, "http://"+b.adminAddr+"/debug/quarantine"), &all); err != nil {
		t.Fatal(err)
	}
	for _, q := range all {
		if q.Namespace == badNamespace {
			return q
		}
	}
	return quarantineRecord{}
}

// lookupStats are the figures of the fleet's lookups over a window.
type lookupStats struct {
	done, failed int
	// longest is the longest lookup: the time from the application's
	// start or its previous lookup's end (plus its pause) to the end of
	// this one.
	longest time.Duration
	fails   []string // "pod time result" of each failed lookup
}

// lookups sums the lookups of pods that ended in (from, to].
func (b *badEnv) lookups(pods []string, from, to time.Time) lookupStats {
	var s lookupStats
	for _, pod := range pods {
		log := b.n.ContainerLog(badNamespace, pod, "app")
		prev := appStart(log)
		for _, r := range b.results(badNamespace, pod) {
			if r.name != webName || r.at.After(to) {
				continue
			}
			if r.at.After(from) {
				s.done++
				if r.out != b.want {
					s.failed++
					s.fails = append(s.fails, pod+" "+r.at.Format(time.StampMilli)+" "+r.out)
				}
				if !prev.IsZero() {
					s.longest = max(s.longest, r.at.Sub(prev))
				}
			}
			prev = r.at.Add(lookupEvery)
		}
	}
	return s
}

// appStart is when the application began its first lookup (its START
// line), zero if it did not say.
func appStart(log string) time.Time {
	for _, line := range strings.Split(log, "\n") {
		if v, ok := strings.CutPrefix(line, "START "); ok {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				return time.Unix(0, n)
			}
		}
	}
	return time.Time{}
}

// row is one line of the test's summary table.
type row struct {
	scenario string
	stats    lookupStats
	reached  string // agents the poisoned version reached, or "-"
	note     string
}

func (r row) String() string {
	return fmt.Sprintf("| %s | %d | %d | %v | %s | %s |", r.scenario, r.stats.done, r.stats.failed,
		r.stats.longest.Round(time.Millisecond), r.reached, r.note)
}
