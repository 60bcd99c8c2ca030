package kubetest

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

var cluster = NewShared()

func TestMain(m *testing.M) {
	code := m.Run()
	cluster.Stop()
	os.Exit(code)
}

func TestMergeArgs(t *testing.T) {
	tests := []struct {
		name     string
		defaults []string
		extra    []string
		want     []string
	}{
		{name: "no extra", defaults: []string{"--a=1", "--b=2"}, want: []string{"--a=1", "--b=2"}},
		{name: "replace", defaults: []string{"--a=1", "--b=2"}, extra: []string{"--b=3"}, want: []string{"--a=1", "--b=3"}},
		{name: "append", defaults: []string{"--a=1"}, extra: []string{"--c=4"}, want: []string{"--a=1", "--c=4"}},
		{name: "empty value replaces", defaults: []string{"--d=x"}, extra: []string{"--d="}, want: []string{"--d="}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, mergeArgs(tt.defaults, tt.extra)); diff != "" {
				t.Errorf("mergeArgs (-want +got):\n%s", diff)
			}
		})
	}
}

// TestSharedCluster checks what users of the harness rely on: a working
// admin clientset, a kubeconfig file that reaches the same server,
// dual-stack service CIDRs, and Pod creation without a controller manager.
func TestSharedCluster(t *testing.T) {
	c := cluster.Get(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns := c.Namespace(t, "harness")

	policy := corev1.IPFamilyPolicyRequireDualStack
	svc, err := c.Client.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{
			IPFamilyPolicy: &policy,
			Ports:          []corev1.ServicePort{{Name: "http", Port: 80}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create dual-stack service: %v", err)
	}
	var families []bool
	for _, ip := range svc.Spec.ClusterIPs {
		families = append(families, netip.MustParseAddr(ip).Is4())
	}
	if diff := cmp.Diff([]bool{true, false}, families); diff != "" {
		t.Errorf("ClusterIPs %v: is-v4 per IP (-want +got):\n%s", svc.Spec.ClusterIPs, diff)
	}

	// The kubeconfig file must reach the same cluster.
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		t.Fatalf("load kubeconfig: %v", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	got, err := cs.CoreV1().Services(ns).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get service through kubeconfig: %v", err)
	}
	if got.UID != svc.UID {
		t.Errorf("kubeconfig client sees service UID %s, want %s", got.UID, svc.UID)
	}

	// Pods are accepted although no controller created anything.
	_, err = c.Client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "app"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Errorf("create pod: %v", err)
	}
}

// TestStartStop starts a private cluster and checks that Stop kills both
// processes and removes the folder.
func TestStartStop(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a second cluster")
	}
	begin := time.Now()
	c := Start(t)
	t.Logf("cluster ready in %v", time.Since(begin))
	pids := []int{c.etcd.cmd.Process.Pid, c.apiserver.cmd.Process.Pid}
	c.Stop()
	c.Stop() // idempotent
	for _, pid := range pids {
		// Signal 0 on a reaped PID fails with ESRCH.
		if err := syscall.Kill(pid, 0); err == nil {
			t.Errorf("pid %d still alive after Stop", pid)
		}
	}
	if _, err := os.Stat(c.Dir); !os.IsNotExist(err) {
		t.Errorf("Dir %s still exists after Stop (stat err %v)", c.Dir, err)
	}
}

func TestSweepStale(t *testing.T) {
	base := t.TempDir()
	mk := func(name, owner string) string {
		d := filepath.Join(base, name)
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if owner != "" {
			if err := os.WriteFile(filepath.Join(d, ownerFile), []byte(owner), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return d
	}
	// A PID that cannot exist: above the kernel's maximum.
	dead := mk("kubetest-dead", "4194305")
	alive := mk("kubetest-alive", strconv.Itoa(os.Getppid()))
	self := mk("kubetest-self", strconv.Itoa(os.Getpid()))
	unowned := mk("kubetest-new", "")
	other := mk("other-dead", "4194305")
	sweepStale(base)
	for _, tt := range []struct {
		dir  string
		want bool
	}{{dead, false}, {alive, true}, {self, true}, {unowned, true}, {other, true}} {
		_, err := os.Stat(tt.dir)
		if got := err == nil; got != tt.want {
			t.Errorf("%s exists = %v, want %v", filepath.Base(tt.dir), got, tt.want)
		}
	}
}
