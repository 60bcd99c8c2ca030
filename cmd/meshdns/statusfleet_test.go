package main

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshdns/meshdns/controlplane/server"
)

// TestAdminPort: the port status forwards to is the one the pod spec gives
// --admin-addr, in each way a flag can be written.
func TestAdminPort(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want int
	}{
		{name: "absent", args: []string{"controlplane"}, want: defaultAdminPort},
		{name: "equals", args: []string{"controlplane", "--admin-addr=127.0.0.1:16014"}, want: 16014},
		{name: "separate", args: []string{"controlplane", "--admin-addr", "127.0.0.1:16015"}, want: 16015},
		{name: "single dash", args: []string{"controlplane", "-admin-addr=[::1]:16016"}, want: 16016},
		{name: "unparsable", args: []string{"controlplane", "--admin-addr=localhost"}, want: defaultAdminPort},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "controlplane", Args: tc.args}}}}
			if got := adminPort(p); got != tc.want {
				t.Errorf("adminPort(%v) = %d, want %d", tc.args, got, tc.want)
			}
		})
	}
}

// TestWhyNotConnected: the reason given for each state of a pod whose
// agent no replica lists.
func TestWhyNotConnected(t *testing.T) {
	agent := corev1.Container{Name: "meshdns-agent"}
	pod := func(node string, phase corev1.PodPhase, st *corev1.ContainerStatus) *corev1.Pod {
		p := &corev1.Pod{Spec: corev1.PodSpec{NodeName: node, InitContainers: []corev1.Container{agent}}, Status: corev1.PodStatus{Phase: phase}}
		if st != nil {
			st.Name = agent.Name
			p.Status.InitContainerStatuses = []corev1.ContainerStatus{*st}
		}
		return p
	}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want string
	}{
		{name: "unscheduled", pod: pod("", corev1.PodPending, nil), want: "not scheduled"},
		{name: "failed", pod: pod("n1", corev1.PodFailed, nil), want: "pod Failed"},
		{name: "not started", pod: pod("n1", corev1.PodPending, nil), want: "has not started"},
		{name: "image", pod: pod("n1", corev1.PodPending, &corev1.ContainerStatus{State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImageNeverPull"}}}), want: "agent not running: ErrImageNeverPull"},
		{name: "crashed", pod: pod("n1", corev1.PodRunning, &corev1.ContainerStatus{State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Error", ExitCode: 1}}}), want: "Error (exit 1)"},
		{name: "unready", pod: pod("n1", corev1.PodRunning, &corev1.ContainerStatus{State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}), want: "not ready"},
		{name: "ready", pod: pod("n1", corev1.PodRunning, &corev1.ContainerStatus{Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}), want: "no stream"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := whyNotConnected(tc.pod, false); !strings.Contains(got, tc.want) {
				t.Errorf("whyNotConnected = %q, want it to say %q", got, tc.want)
			}
		})
	}
}

// TestMergeFleet: agents of every replica are listed with their replica;
// an agent seen on two replicas (a stream ending on the one it left) is
// judged by its newest stream; NACKing agents and pods no replica has are
// unsynced, the latter marked when a replica could not be read.
func TestMergeFleet(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 7, 0, 0, 0, time.UTC)
	synced := func(ns, pod string, at time.Time) server.AgentInfo {
		return server.AgentInfo{Namespace: ns, Pod: pod, Acked: "v2", Sent: "v2", View: "v2", Connected: at}
	}
	nacking := server.AgentInfo{Namespace: "shop", Pod: "nack", Acked: "v1", Sent: "v2", View: "v2", Nacks: 3, LastNack: "bad table", Connected: t0}
	moved := synced("shop", "moved", t0.Add(time.Minute))
	leftBehind := server.AgentInfo{Namespace: "shop", Pod: "moved", Sent: "v2", View: "v2", Nacks: 1, LastNack: "old", Connected: t0}
	replicas := []corev1.Pod{{ObjectMeta: metav1.ObjectMeta{Name: "cp-a"}}, {ObjectMeta: metav1.ObjectMeta{Name: "cp-b"}}, {ObjectMeta: metav1.ObjectMeta{Name: "cp-c"}}}
	agents := [][]server.AgentInfo{{synced("shop", "web", t0), nacking, leftBehind}, {moved, synced("other", "db", t0)}, nil}
	pod := func(ns, name string) corev1.Pod {
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "meshdns-agent"}}}}
	}
	injected := []corev1.Pod{pod("shop", "web"), pod("shop", "nack"), pod("shop", "moved"), pod("shop", "lost"), pod("other", "db")}

	fs := &fleetStatus{Replicas: []replicaStatus{{Pod: "cp-a"}, {Pod: "cp-b"}, {Pod: "cp-c", Error: "port-forward: refused"}}}
	mergeFleet(fs, replicas, agents, injected, nil, "")
	var got []string
	for _, a := range fs.Agents {
		got = append(got, a.Namespace+"/"+a.Pod+"@"+a.Replica)
	}
	want := []string{"other/db@cp-b", "shop/moved@cp-a", "shop/moved@cp-b", "shop/nack@cp-a", "shop/web@cp-a"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("agents (-want +got):\n%s", diff)
	}
	reasons := map[string]string{}
	for _, u := range fs.Unsynced {
		reasons[u.Namespace+"/"+u.Pod] = u.Reason
	}
	if len(reasons) != 2 || !strings.Contains(reasons["shop/nack"], "connected to cp-a but NACKing: bad table") ||
		!strings.Contains(reasons["shop/lost"], "which could not be read") || !strings.Contains(reasons["shop/lost"], "cp-c") {
		t.Errorf("unsynced %v: want shop/nack NACKing on cp-a and shop/lost, maybe on the unread cp-c", reasons)
	}

	fs = &fleetStatus{Replicas: []replicaStatus{{Pod: "cp-a"}, {Pod: "cp-b"}, {Pod: "cp-c"}}}
	mergeFleet(fs, replicas, agents, injected, nil, "other")
	if len(fs.Agents) != 1 || fs.Agents[0].Pod != "db" {
		t.Errorf("--namespace other: agents %+v", fs.Agents)
	}
}
