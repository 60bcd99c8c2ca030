package mcssource

import (
	"cmp"
	"net/netip"
	"slices"
	"strings"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/meshdns/meshdns/pkg/nametable"
)

// The informers decode unstructured objects (the dynamic client); the
// transforms replace each with a small struct of what the conversion reads
// before it enters the cache. client-go's cache needs only a key, which it
// gets through metav1.ObjectMetaAccessor. Anything else (tombstones,
// objects already transformed) is left alone, as client-go requires.

// serviceImport is what the cache keeps of a ServiceImport.
type serviceImport struct {
	meta     metav1.ObjectMeta // Name and Namespace only
	headless bool              // spec.type Headless (else ClusterSetIP)
	ips      []netip.Addr      // spec.ips that parse
	ports    []nametable.Port  // named spec.ports, sorted
}

func (s *serviceImport) GetObjectMeta() metav1.Object { return &s.meta }

// endpointSlice is what the cache keeps of an EndpointSlice of an import.
type endpointSlice struct {
	meta        metav1.ObjectMeta // Name and Namespace only
	serviceName string            // the multicluster.kubernetes.io/service-name label
	cluster     string            // the multicluster.kubernetes.io/source-cluster label
	ports       []nametable.Port
	endpoints   []endpoint
}

func (s *endpointSlice) GetObjectMeta() metav1.Object { return &s.meta }

type endpoint struct {
	hostname string
	addrs    []netip.Addr
}

func transformImport(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	var in struct {
		Spec struct {
			Type  string   `json:"type"`
			IPs   []string `json:"ips"`
			Ports []struct {
				Name     string `json:"name"`
				Port     int32  `json:"port"`
				Protocol string `json:"protocol"`
			} `json:"ports"`
		} `json:"spec"`
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &in); err != nil {
		return nil, err
	}
	out := &serviceImport{
		meta:     metav1.ObjectMeta{Name: u.GetName(), Namespace: u.GetNamespace()},
		headless: in.Spec.Type == "Headless",
	}
	for _, s := range in.Spec.IPs {
		if a, err := netip.ParseAddr(s); err == nil {
			out.ips = append(out.ips, a.Unmap())
		}
	}
	for _, p := range in.Spec.Ports {
		out.ports = appendPort(out.ports, p.Name, p.Port, p.Protocol)
	}
	out.ports = sortPorts(out.ports)
	return out, nil
}

func transformSlice(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	var in discoveryv1.EndpointSlice
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &in); err != nil {
		return nil, err
	}
	out := &endpointSlice{
		meta:        metav1.ObjectMeta{Name: in.Name, Namespace: in.Namespace},
		serviceName: in.Labels[LabelServiceName],
		cluster:     in.Labels[LabelSourceCluster],
	}
	for _, p := range in.Ports {
		if p.Name == nil || p.Port == nil {
			continue
		}
		proto := ""
		if p.Protocol != nil {
			proto = string(*p.Protocol)
		}
		out.ports = appendPort(out.ports, *p.Name, *p.Port, proto)
	}
	out.ports = sortPorts(out.ports)
	for _, ep := range in.Endpoints {
		// As the Kubernetes DNS specification: ready nil means ready.
		if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
			continue
		}
		e := endpoint{}
		if ep.Hostname != nil {
			e.hostname = strings.ToLower(*ep.Hostname)
		}
		for _, s := range ep.Addresses {
			if a, err := netip.ParseAddr(s); err == nil {
				e.addrs = append(e.addrs, a.Unmap())
			}
		}
		if len(e.addrs) > 0 {
			out.endpoints = append(out.endpoints, e)
		}
	}
	return out, nil
}

// appendPort appends a named port with a known protocol; SRV names need
// the name.
func appendPort(ports []nametable.Port, name string, port int32, proto string) []nametable.Port {
	if proto == "" {
		proto = "TCP"
	}
	if name == "" || port <= 0 || port > 65535 || (proto != "TCP" && proto != "UDP" && proto != "SCTP") {
		return ports
	}
	return append(ports, nametable.Port{Name: strings.ToLower(name), Port: uint16(port), Protocol: proto})
}

func sortPorts(p []nametable.Port) []nametable.Port {
	slices.SortFunc(p, func(a, b nametable.Port) int {
		return cmp.Or(strings.Compare(a.Name, b.Name), strings.Compare(a.Protocol, b.Protocol), cmp.Compare(a.Port, b.Port))
	})
	return slices.Compact(p)
}
