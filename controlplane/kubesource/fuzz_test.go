package kubesource

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
)

// FuzzEndpoints feeds the headless conversion EndpointSlices built from
// arbitrary text (addresses the API server would reject included, since a
// slice written by a buggy controller must not crash the control plane) and
// checks its invariants: every endpoint has an address, endpoints are
// sorted, a hostname appears once, an address without hostname appears
// once, and every address came from the input.
func FuzzEndpoints(f *testing.F) {
	f.Add("10.0.0.1,10.0.0.2", "a,b", "fd00::1", "a", true)      // dual-stack pod under one hostname
	f.Add("10.0.0.1,10.0.0.1", ",", "", "", false)               // one address twice without hostname
	f.Add("nonsense,::ffff:10.0.0.3", "x,", "1.2.3.4", "", true) // garbage, a v4-mapped v6, v4 in a v6 slice
	f.Add("", "", "", "", true)                                  // nothing
	f.Add("", "", "fe80::1%eth0", "z", true)                     // a zone the table could not serve
	f.Fuzz(func(t *testing.T, v4, v4hosts, v6, v6hosts string, ready bool) {
		mk := func(family discoveryv1.AddressType, addrList, hostList string) *discoveryv1.EndpointSlice {
			hosts := strings.Split(hostList, ",")
			s := &discoveryv1.EndpointSlice{AddressType: family}
			for i, a := range strings.Split(addrList, ",") {
				e := discoveryv1.Endpoint{Addresses: []string{a}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}
				if i < len(hosts) && hosts[i] != "" {
					e.Hostname = &hosts[i]
				}
				s.Endpoints = append(s.Endpoints, e)
			}
			return s
		}
		in := []*discoveryv1.EndpointSlice{
			mk(discoveryv1.AddressTypeIPv4, v4, v4hosts),
			mk(discoveryv1.AddressTypeIPv6, v6, v6hosts),
		}
		inputs := map[netip.Addr]bool{}
		for _, a := range strings.Split(v4+","+v6, ",") {
			if p, err := netip.ParseAddr(a); err == nil && p.Zone() == "" {
				inputs[p.Unmap()] = true
			}
		}
		got := endpoints(cached(in), false)
		if !ready && len(got) > 0 {
			t.Fatalf("not-ready endpoints published: %v", got)
		}
		hosts := map[string]bool{}
		bare := map[netip.Addr]bool{}
		for i, e := range got {
			if len(e.IPs) == 0 {
				t.Fatalf("endpoint %d without addresses: %v", i, got)
			}
			if i > 0 && e.Hostname < got[i-1].Hostname {
				t.Fatalf("endpoints not sorted by hostname: %v", got)
			}
			if e.Hostname != "" {
				if hosts[e.Hostname] {
					t.Fatalf("hostname %q twice: %v", e.Hostname, got)
				}
				hosts[e.Hostname] = true
			} else {
				if len(e.IPs) != 1 || bare[e.IPs[0]] {
					t.Fatalf("address without hostname repeated or grouped: %v", got)
				}
				bare[e.IPs[0]] = true
			}
			if !slices.IsSortedFunc(e.IPs, netip.Addr.Compare) {
				t.Fatalf("addresses of %q not sorted: %v", e.Hostname, e.IPs)
			}
			for _, a := range e.IPs {
				if !inputs[a] {
					t.Fatalf("address %v not among the parsed, unmapped inputs", a)
				}
			}
		}
	})
}
