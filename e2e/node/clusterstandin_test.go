package node

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/meshdns/meshdns/internal/testkit/nodetest"
)

// clusterStandIn does, for what a user's helm install makes, the jobs of
// the parts of a cluster that do not run beside the node here (no
// controller manager, scheduler, kube-proxy or cluster DNS): it reacts to
// the objects in the API server, as they do, so the install itself is run
// as a user runs it.
//
//   - root CA publisher: every namespace gets kube-root-ca.crt, which the
//     pods' projected ServiceAccount tokens mount;
//   - scheduler: pods without a node are bound to the node;
//   - Deployment controller and garbage collector: each Deployment of the
//     release namespace gets its pods from its template (host networking:
//     the API server listens on the machine's loopback, which the pod
//     network does not reach) and its status, as kubectl rollout status
//     reads it; a Deployment gone takes its pods;
//   - kube-proxy: each Service of the release namespace selecting those
//     pods gets DNAT rules from its ClusterIP ports to the node address and
//     target ports, for pods (PREROUTING) and the API server's webhook
//     calls (OUTPUT);
//   - cluster DNS: the DNS stand-in answers those Services' names.
type clusterStandIn struct {
	e  *env
	ns string // the release namespace
	// state: what has been done, so each object is handled once.
	caDone   map[string]bool
	rules    map[string][][]string // Service name: its DNAT rules
	pods     map[string][]string   // Deployment name: its pods
	podCount int
}

// runClusterStandIn starts the stand-in until the test ends; it reacts to
// changes within a poll of 200 ms.
func runClusterStandIn(t *testing.T, e *env, ns string) {
	t.Helper()
	s := &clusterStandIn{e: e, ns: ns, caDone: map[string]bool{}, rules: map[string][][]string{}, pods: map[string][]string{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() {
		cancel()
		<-done
		for _, rs := range s.rules {
			s.deleteRules(rs)
		}
	})
	go func() {
		defer close(done)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			for _, step := range []func(context.Context) error{s.publishRootCA, s.schedule, s.deployments, s.services} {
				if err := step(ctx); err != nil && ctx.Err() == nil {
					t.Logf("cluster stand-in: %v", err)
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
}

func (s *clusterStandIn) publishRootCA(ctx context.Context) error {
	nss, err := s.e.c.Client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, ns := range nss.Items {
		if s.caDone[ns.Name] || ns.DeletionTimestamp != nil {
			continue
		}
		_, err := s.e.c.Client.CoreV1().ConfigMaps(ns.Name).Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "kube-root-ca.crt"},
			Data:       map[string]string{"ca.crt": string(s.e.c.CAPEM)},
		}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("kube-root-ca.crt in %s: %w", ns.Name, err)
		}
		s.caDone[ns.Name] = true
	}
	return nil
}

func (s *clusterStandIn) schedule(ctx context.Context) error {
	cs := s.e.c.Client
	pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName="})
	if err != nil {
		return err
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		err := cs.CoreV1().Pods(p.Namespace).Bind(ctx, &corev1.Binding{
			ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace},
			Target:     corev1.ObjectReference{Kind: "Node", Name: nodetest.NodeName},
		}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsConflict(err) {
			return fmt.Errorf("bind %s/%s: %w", p.Namespace, p.Name, err)
		}
	}
	return nil
}

// deployments makes the pods of new Deployments, keeps their status and
// deletes the pods of Deployments gone.
func (s *clusterStandIn) deployments(ctx context.Context) error {
	cs := s.e.c.Client
	list, err := cs.AppsV1().Deployments(s.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	seen := map[string]bool{}
	for i := range list.Items {
		d := &list.Items[i]
		seen[d.Name] = true
		if _, ok := s.pods[d.Name]; !ok {
			if err := s.startPods(ctx, d); err != nil {
				return err
			}
		}
		if err := s.deploymentStatus(ctx, d); err != nil {
			return err
		}
	}
	for name, pods := range s.pods {
		if seen[name] {
			continue
		}
		zero := int64(0)
		for _, p := range pods {
			err := cs.CoreV1().Pods(s.ns).Delete(ctx, p, metav1.DeleteOptions{GracePeriodSeconds: &zero})
			if err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("delete %s of deployment %s: %w", p, name, err)
			}
		}
		delete(s.pods, name)
	}
	return nil
}

func (s *clusterStandIn) startPods(ctx context.Context, d *appsv1.Deployment) error {
	replicas := 1
	if d.Spec.Replicas != nil {
		replicas = int(*d.Spec.Replicas)
	}
	var names []string
	for range replicas {
		s.podCount++
		spec := d.Spec.Template.Spec.DeepCopy()
		spec.HostNetwork, spec.NodeName = true, nodetest.NodeName
		spec.DNSPolicy = corev1.DNSClusterFirstWithHostNet
		ctrl := true
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
			Name: d.Name + "-" + strconv.Itoa(s.podCount), Namespace: s.ns,
			Labels: d.Spec.Template.Labels, Annotations: d.Spec.Template.Annotations,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: d.Name, UID: d.UID, Controller: &ctrl}},
		}, Spec: *spec}
		if _, err := s.e.c.Client.CoreV1().Pods(s.ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("pod of deployment %s: %w", d.Name, err)
		}
		names = append(names, p.Name)
	}
	s.pods[d.Name] = names
	return nil
}

// deploymentStatus writes what the Deployment controller would once its
// pods are ready, which kubectl rollout status waits for.
func (s *clusterStandIn) deploymentStatus(ctx context.Context, d *appsv1.Deployment) error {
	ready := int32(0)
	for _, name := range s.pods[d.Name] {
		p, err := s.e.c.Client.CoreV1().Pods(s.ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil && podReady(p) {
			ready++
		}
	}
	n := int32(len(s.pods[d.Name]))
	st := &d.Status
	if st.ObservedGeneration == d.Generation && st.Replicas == n && st.ReadyReplicas == ready {
		return nil
	}
	st.ObservedGeneration, st.Replicas, st.UpdatedReplicas = d.Generation, n, n
	st.ReadyReplicas, st.AvailableReplicas, st.UnavailableReplicas = ready, ready, n-ready
	if _, err := s.e.c.Client.AppsV1().Deployments(s.ns).UpdateStatus(ctx, d, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) {
		return fmt.Errorf("status of deployment %s: %w", d.Name, err)
	}
	return nil
}

// services routes the ClusterIP ports of the release's Services to the
// host-network pods of its Deployments, and names them in the DNS.
func (s *clusterStandIn) services(ctx context.Context) error {
	cs := s.e.c.Client
	list, err := cs.CoreV1().Services(s.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	deps, err := cs.AppsV1().Deployments(s.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, svc := range list.Items {
		seen[svc.Name] = true
		ip := svc.Spec.ClusterIP
		if _, ok := s.rules[svc.Name]; ok || ip == "" || ip == corev1.ClusterIPNone {
			continue
		}
		var backend *appsv1.Deployment
		for i := range deps.Items {
			if len(svc.Spec.Selector) > 0 && labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(deps.Items[i].Spec.Template.Labels)) {
				backend = &deps.Items[i]
			}
		}
		if backend == nil {
			continue
		}
		var rules [][]string
		for _, port := range svc.Spec.Ports {
			target := targetPort(port, backend)
			for _, chain := range []string{"PREROUTING", "OUTPUT"} {
				rules = append(rules, []string{chain, "-d", ip + "/32", "-p", "tcp", "--dport", strconv.Itoa(int(port.Port)),
					"-m", "comment", "--comment", "meshdns e2e/node service", "-j", "DNAT", "--to-destination",
					nodetest.NodeIP.String() + ":" + strconv.Itoa(target)})
			}
		}
		for _, r := range rules {
			if out, err := exec.Command("iptables", append([]string{"-w", "-t", "nat", "-A"}, r...)...).CombinedOutput(); err != nil {
				return fmt.Errorf("iptables -A %v: %v: %s", r, err, out)
			}
		}
		s.rules[svc.Name] = rules
		s.e.standIn.answer(svc.Name+"."+s.ns+".svc.cluster.local.", ip)
	}
	for name, rules := range s.rules {
		if !seen[name] {
			s.deleteRules(rules)
			delete(s.rules, name)
		}
	}
	return nil
}

func (s *clusterStandIn) deleteRules(rules [][]string) {
	for _, r := range rules {
		_ = exec.Command("iptables", append([]string{"-w", "-t", "nat", "-D"}, r...)...).Run()
	}
}

// targetPort is the container port a Service port sends to: a number, or
// the named port of the backend's containers.
func targetPort(port corev1.ServicePort, backend *appsv1.Deployment) int {
	if port.TargetPort.StrVal == "" {
		if port.TargetPort.IntVal != 0 {
			return int(port.TargetPort.IntVal)
		}
		return int(port.Port)
	}
	for _, c := range backend.Spec.Template.Spec.Containers {
		for _, p := range c.Ports {
			if p.Name == port.TargetPort.StrVal {
				return int(p.ContainerPort)
			}
		}
	}
	return int(port.Port)
}
