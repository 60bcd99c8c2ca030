package main

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshdns/meshdns/internal/testkit/kubetest"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

// TestOutOfEndpoints runs the drain's wait against a real API server: it
// holds while an EndpointSlice of the Service lists the pod as ready, and
// ends once the pod is listed not ready (as the endpoint controller does
// for a terminating pod).
func TestOutOfEndpoints(t *testing.T) {
	c := kubetest.Start(t)
	ctx := context.Background()
	ns := c.Namespace(t, "meshdns")
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "meshdns-controlplane-abc", Labels: map[string]string{discoveryv1.LabelServiceName: "meshdns-controlplane"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"10.0.0.1"}, Conditions: discoveryv1.EndpointConditions{Ready: ptrTo(true)}, TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: "cp-0"}},
			{Addresses: []string{"10.0.0.2"}, Conditions: discoveryv1.EndpointConditions{Ready: ptrTo(true)}, TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: "cp-1"}},
		},
	}
	api := c.Client.DiscoveryV1().EndpointSlices(ns)
	slice, err := api.Create(ctx, slice, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	k, err := newKubeREST(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	var lists atomic.Int32
	list := func(ctx context.Context, opts metav1.ListOptions) ([]discoveryv1.EndpointSlice, error) {
		lists.Add(1)
		var l discoveryv1.EndpointSliceList
		err := k.list(ctx, k.discovery, ns, "endpointslices", opts, &l)
		return l.Items, err
	}
	dctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- outOfEndpoints(dctx, list, "meshdns-controlplane", "cp-0", 10*time.Millisecond, 0) }()
	testenv.Eventually(t, "the drain reads the endpoints", 30*time.Second, func() bool { return lists.Load() >= 3 })
	select {
	case err := <-done:
		t.Fatalf("drain ended while the pod is a ready endpoint: %v", err)
	default:
	}
	slice.Endpoints[0].Conditions = discoveryv1.EndpointConditions{Ready: ptrTo(false), Serving: ptrTo(true), Terminating: ptrTo(true)}
	if _, err := api.Update(ctx, slice, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("drain: %v", err)
	}
}

func ptrTo[T any](v T) *T { return &v }
