//go:build !agentonly

package main

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
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
			if got := whyNotConnected(tc.pod); !strings.Contains(got, tc.want) {
				t.Errorf("whyNotConnected = %q, want it to say %q", got, tc.want)
			}
		})
	}
}
