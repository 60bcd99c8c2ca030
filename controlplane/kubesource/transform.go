package kubesource

import (
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The informer caches hold every Service and EndpointSlice for the life of
// the control plane, so they keep only what buildEntry and the event
// handlers read. The transforms build a new, small object rather than
// clearing fields of the decoded one: the decoded object (managedFields,
// last-applied-configuration annotations, selectors, status, topology,
// target references) becomes garbage at once.
//
// Both transforms are idempotent, as client-go requires.

// keepServiceAnnotations are the Service annotations read after the
// transform.
var keepServiceAnnotations = []string{AnnotationExportTo}

// keepSliceAnnotations are the EndpointSlice annotations read after the
// transform: the trigger time gives the DNS programming latency its start.
var keepSliceAnnotations = []string{corev1.EndpointsLastChangeTriggerTime}

func transformService(obj any) (any, error) {
	svc, ok := obj.(*corev1.Service)
	if !ok {
		return obj, nil // a tombstone or something else; leave it
	}
	out := &corev1.Service{
		ObjectMeta: slimMeta(&svc.ObjectMeta, keepServiceAnnotations, nil),
		Spec: corev1.ServiceSpec{
			Type:                     svc.Spec.Type,
			ClusterIP:                svc.Spec.ClusterIP,
			ClusterIPs:               svc.Spec.ClusterIPs,
			ExternalName:             svc.Spec.ExternalName,
			PublishNotReadyAddresses: svc.Spec.PublishNotReadyAddresses,
		},
	}
	for _, p := range svc.Spec.Ports {
		if p.Name == "" {
			continue // only named ports make SRV records
		}
		out.Spec.Ports = append(out.Spec.Ports, corev1.ServicePort{Name: p.Name, Protocol: p.Protocol, Port: p.Port})
	}
	return out, nil
}

func transformEndpointSlice(obj any) (any, error) {
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return obj, nil
	}
	out := &discoveryv1.EndpointSlice{
		ObjectMeta:  slimMeta(&s.ObjectMeta, keepSliceAnnotations, []string{discoveryv1.LabelServiceName}),
		AddressType: s.AddressType,
		Ports:       s.Ports,
	}
	if len(s.Endpoints) > 0 {
		out.Endpoints = make([]discoveryv1.Endpoint, len(s.Endpoints))
		for i, ep := range s.Endpoints {
			out.Endpoints[i] = discoveryv1.Endpoint{
				Addresses:  ep.Addresses,
				Conditions: discoveryv1.EndpointConditions{Ready: ep.Conditions.Ready},
				Hostname:   ep.Hostname,
			}
		}
	}
	return out, nil
}

// slimMeta keeps the name of an object and the named annotations and
// labels.
func slimMeta(m *metav1.ObjectMeta, annotations, labels []string) metav1.ObjectMeta {
	// Not even UID and ResourceVersion: nothing reads them from the
	// cache (the reflector tracks the list's resource version itself).
	return metav1.ObjectMeta{
		Name:        m.Name,
		Namespace:   m.Namespace,
		Annotations: pick(m.Annotations, annotations),
		Labels:      pick(m.Labels, labels),
	}
}

func pick(m map[string]string, keys []string) map[string]string {
	var out map[string]string
	for _, k := range keys {
		if v, ok := m[k]; ok {
			if out == nil {
				out = make(map[string]string, len(keys))
			}
			out[k] = v
		}
	}
	return out
}
