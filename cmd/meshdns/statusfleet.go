package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/meshdns/meshdns/controlplane/server"
)

// The fleet view of status (--kubeconfig): every control plane replica,
// found through the API server and reached through its port-forward, the
// agents of all merged, and the injected pods none of them has.

// defaultAdminPort is the control plane's --admin-addr port when its pod
// spec does not say another.
const defaultAdminPort = 15014

// fleetStatus is what status --kubeconfig --output json prints.
type fleetStatus struct {
	Replicas []replicaStatus `json:"replicas"`
	Agents   []fleetAgent    `json:"agents"`
	// Unsynced are the injected pods whose agent is connected to no
	// replica, or NACKs; each with the reason status could tell.
	Unsynced []unsyncedPod `json:"unsynced"`
}

type replicaStatus struct {
	Pod    string `json:"pod"`
	Phase  string `json:"phase"` // the pod's; only a Running one is read
	Agents int    `json:"agents"`
	Error  string `json:"error,omitempty"` // why a running one's agents could not be read
}

type fleetAgent struct {
	server.AgentInfo
	Replica string `json:"replica"` // the control plane pod it streams from
}

type unsyncedPod struct {
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	Reason    string `json:"reason"`
	// SafeMode is its probe port's answer when its supervisor is in safe
	// mode ("safe mode: <reason>"; statussafe.go).
	SafeMode string `json:"safeMode,omitempty"`
}

// fleetOptions say where readFleet finds the replicas (fleetFlags) and
// whose agents it reads.
type fleetOptions struct {
	system, selector, namespace string
}

// readFleet lists the replicas, reads each one's agents through its
// port-forward (concurrently), and compares them with the injected pods.
func readFleet(ctx context.Context, rc *rest.Config, o fleetOptions) (*fleetStatus, error) {
	k, err := newKubeREST(rc)
	if err != nil {
		return nil, err
	}
	var replicas corev1.PodList
	if err := k.list(ctx, k.core, o.system, "pods", metav1.ListOptions{LabelSelector: o.selector}, &replicas); err != nil {
		return nil, fmt.Errorf("list control plane pods (%s in %s): %w", o.selector, o.system, err)
	}
	if len(replicas.Items) == 0 {
		return nil, fmt.Errorf("no control plane pod in namespace %s with labels %s (--system-namespace, --selector)", o.system, o.selector)
	}
	slices.SortFunc(replicas.Items, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	fs := &fleetStatus{Replicas: make([]replicaStatus, len(replicas.Items))}
	agents := make([][]server.AgentInfo, len(replicas.Items))
	var wg sync.WaitGroup
	for i := range replicas.Items {
		p := &replicas.Items[i]
		fs.Replicas[i].Pod, fs.Replicas[i].Phase = p.Name, string(p.Status.Phase)
		if p.Status.Phase != corev1.PodRunning {
			continue // no agents: a surge pod starting, or one that failed
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			as, err := replicaAgents(ctx, rc, p)
			if err != nil {
				fs.Replicas[i].Error = err.Error()
				return
			}
			agents[i], fs.Replicas[i].Agents = as, len(as)
		}()
	}
	wg.Wait()
	injected, err := injectedPods(ctx, k, o.namespace)
	if err != nil {
		return nil, err
	}
	probes := probeSafeMode(ctx, k, unlisted(agents, injected))
	mergeFleet(fs, replicas.Items, agents, injected, probes, o.namespace)
	return fs, nil
}

// unlisted are the injected pods no replica lists whose agent container
// runs: the ones whose supervisor may be in safe mode.
func unlisted(agents [][]server.AgentInfo, injected []corev1.Pod) []*corev1.Pod {
	listed := map[string]bool{}
	for _, as := range agents {
		for _, a := range as {
			listed[a.Namespace+"/"+a.Pod] = true
		}
	}
	var out []*corev1.Pod
	for i := range injected {
		p := &injected[i]
		if !listed[p.Namespace+"/"+p.Name] && agentRunning(p) {
			out = append(out, p)
		}
	}
	return out
}

// mergeFleet fills fs's agents (each with its replica) and unsynced pods
// from what each replica listed (agents[i] is replicas[i]'s), the
// injected pods and what the probe ports of those not listed said (by
// namespace/name); fs.Replicas is already filled, with the read errors.
func mergeFleet(fs *fleetStatus, replicas []corev1.Pod, agents [][]server.AgentInfo, injected []corev1.Pod,
	probes map[string]probeOutcome, namespace string) {
	connected := map[string]fleetAgent{} // namespace/pod -> the agent, any replica
	for i, as := range agents {
		for _, a := range as {
			fa := fleetAgent{AgentInfo: a, Replica: replicas[i].Name}
			fs.Agents = append(fs.Agents, fa)
			key := a.Namespace + "/" + a.Pod
			// One agent holds one stream; a second entry is a stream
			// that is ending on the replica it left. Keep the newest.
			if old, ok := connected[key]; !ok || a.Connected.After(old.Connected) {
				connected[key] = fa
			}
		}
	}
	slices.SortStableFunc(fs.Agents, func(a, b fleetAgent) int {
		return strings.Compare(a.Namespace+"/"+a.Pod+"/"+a.Replica, b.Namespace+"/"+b.Pod+"/"+b.Replica)
	})
	var unreachable []string
	for _, r := range fs.Replicas {
		if r.Error != "" {
			unreachable = append(unreachable, r.Pod)
		}
	}
	for i := range injected {
		p := &injected[i]
		a, ok := connected[p.Namespace+"/"+p.Name]
		probe, probed := probes[p.Namespace+"/"+p.Name]
		var reason string
		switch {
		case ok && syncState(a.AgentInfo) == "NACKED":
			reason = "connected to " + a.Replica + " but NACKing: " + short(a.LastNack, 120)
		case ok:
			continue
		case probe.SafeMode != "":
			reason = safeModeReason(probe, probed)
		default:
			reason = whyNotConnected(p, probed && probe.Err == nil)
			if len(unreachable) > 0 {
				reason += " (or connected to " + strings.Join(unreachable, ", ") + ", which could not be read)"
			}
			if why := safeModeReason(probe, probed); why != "" {
				reason += "; " + why
			}
		}
		fs.Unsynced = append(fs.Unsynced, unsyncedPod{Namespace: p.Namespace, Pod: p.Name, Reason: reason, SafeMode: probe.SafeMode})
	}
	if namespace != "" {
		kept := fs.Agents[:0]
		for _, a := range fs.Agents {
			if a.Namespace == namespace {
				kept = append(kept, a)
			}
		}
		fs.Agents = kept
	}
}

// replicaAgents reads /debug/agents of one control plane pod through the
// API server's port-forward to its admin port.
func replicaAgents(ctx context.Context, rc *rest.Config, p *corev1.Pod) ([]server.AgentInfo, error) {
	t, err := dialPod(rc, p.Namespace, p.Name)
	if err != nil {
		return nil, err
	}
	defer t.Close()
	port := adminPort(p)
	c := t.httpClient(port)
	// The host is not dialled (the tunnel is) but sent as the Host
	// header, which the admin port answers only when it names loopback:
	// the tunnel does end on the pod's 127.0.0.1. Errors are the
	// replica's, named by the caller.
	agents, err := fetchAgentsWith(ctx, c, "http://127.0.0.1:"+strconv.Itoa(port)+"/debug/agents")
	if err != nil {
		return nil, err
	}
	return agents, nil
}

// adminPort is the port of the controlplane container's --admin-addr, as
// its pod spec says, or the default.
func adminPort(p *corev1.Pod) int {
	for _, c := range p.Spec.Containers {
		if c.Name != "controlplane" && len(p.Spec.Containers) > 1 {
			continue
		}
		for i, a := range c.Args {
			v, ok := strings.CutPrefix(a, "--admin-addr=")
			if !ok && (a == "--admin-addr" || a == "-admin-addr") && i+1 < len(c.Args) {
				v, ok = c.Args[i+1], true
			}
			if !ok {
				v, ok = strings.CutPrefix(a, "-admin-addr=")
			}
			if ok {
				if port, err := strconv.Atoi(v[strings.LastIndex(v, ":")+1:]); err == nil {
					return port
				}
			}
		}
	}
	return defaultAdminPort
}

// injectedPods lists the pods with the meshdns agent, in namespace or all.
func injectedPods(ctx context.Context, k *kubeREST, namespace string) ([]corev1.Pod, error) {
	var out []corev1.Pod
	opts := metav1.ListOptions{Limit: 500}
	for {
		var pods corev1.PodList
		if err := k.list(ctx, k.core, namespace, "pods", opts, &pods); err != nil {
			return nil, fmt.Errorf("list pods: %w", err)
		}
		for _, p := range pods.Items {
			if agentOf(&p) != nil && p.DeletionTimestamp == nil {
				out = append(out, p)
			}
		}
		if opts.Continue = pods.Continue; opts.Continue == "" {
			break
		}
	}
	slices.SortFunc(out, func(a, b corev1.Pod) int { return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name) })
	return out, nil
}

// whyNotConnected says what the pod's status tells about an agent no
// replica lists; probed says its probe port was read, and did not say
// safe mode.
func whyNotConnected(p *corev1.Pod, probed bool) string {
	switch {
	case p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed:
		return "pod " + string(p.Status.Phase) + ": the agent has stopped"
	case p.Spec.NodeName == "":
		return "pod not scheduled yet: no agent runs"
	}
	var st *corev1.ContainerStatus
	for _, ss := range [][]corev1.ContainerStatus{p.Status.InitContainerStatuses, p.Status.ContainerStatuses} {
		for i := range ss {
			if ss[i].Name == agentOf(p).Name {
				st = &ss[i]
			}
		}
	}
	switch {
	case st == nil:
		return "pod " + orDash(string(p.Status.Phase)) + " on " + p.Spec.NodeName + ": the agent has not started"
	case st.State.Waiting != nil:
		return "agent not running: " + st.State.Waiting.Reason + messageOf(st.State.Waiting.Message)
	case st.State.Terminated != nil:
		return fmt.Sprintf("agent not running: %s (exit %d)%s", st.State.Terminated.Reason, st.State.Terminated.ExitCode, messageOf(st.State.Terminated.Message))
	case !st.Ready:
		return "agent running, not ready: it has no table yet (it cannot reach a control plane, or is refused; see its log)"
	}
	// A supervisor in safe mode (the agent crash-looping) also reports
	// ready while it forwards; only its probe port tells which.
	if probed {
		return "agent ready but no stream to any replica: it serves its last table and is reconnecting"
	}
	return "agent ready but no stream to any replica: it serves its last table and is reconnecting, or its supervisor is in safe mode (its probe port's /healthz/ready says which)"
}

func messageOf(m string) string {
	if m == "" {
		return ""
	}
	return ": " + short(m, 100)
}

func printFleet(w io.Writer, fs *fleetStatus, output string) error {
	if output == "json" {
		if fs.Agents == nil {
			fs.Agents = []fleetAgent{}
		}
		if fs.Unsynced == nil {
			fs.Unsynced = []unsyncedPod{}
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(fs)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "REPLICA\tPHASE\tAGENTS\tERROR")
	for _, r := range fs.Replicas {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", r.Pod, orDash(r.Phase), r.Agents, orDash(r.Error))
	}
	fmt.Fprintln(tw)
	if len(fs.Agents) == 0 {
		fmt.Fprintln(tw, "no agents connected to any replica")
	} else {
		fmt.Fprintln(tw, "NAMESPACE\tPOD\tREPLICA\tSTATUS\tACKED\tCURRENT\tNACKS\tLAST NACK\tAGENT VERSION\tCONNECTED")
		for _, a := range fs.Agents {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n",
				orDash(a.Namespace), orDash(a.Pod), a.Replica, syncState(a.AgentInfo), orDash(short(a.Acked, 12)), orDash(short(a.View, 12)),
				a.Nacks, orDash(short(a.LastNack, 60)), orDash(a.AgentVersion), a.Connected.UTC().Format(time.RFC3339))
		}
	}
	if len(fs.Unsynced) > 0 {
		fmt.Fprintln(tw)
		fmt.Fprintln(tw, "INJECTED POD NOT IN SYNC\tREASON")
		for _, u := range fs.Unsynced {
			fmt.Fprintf(tw, "%s/%s\t%s\n", u.Namespace, u.Pod, u.Reason)
		}
	}
	return tw.Flush()
}

// runStatusFleet is status through the API server. It fails (exit 1), after printing
// what it read, when a replica could not be read: the view is incomplete.
func runStatusFleet(ctx context.Context, stdout io.Writer, fleet *fleetFlags) error {
	ctx, cancel := context.WithTimeout(ctx, fleet.timeout)
	defer cancel()
	fs, err := fleet.read(ctx)
	if err != nil {
		return err
	}
	if err := printFleet(stdout, fs, fleet.output); err != nil {
		return err
	}
	var failed []string
	for _, r := range fs.Replicas {
		if r.Error != "" {
			failed = append(failed, r.Pod)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("could not read the agents of %d of %d replicas: %s", len(failed), len(fs.Replicas), strings.Join(failed, ", "))
	}
	return nil
}
