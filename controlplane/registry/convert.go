package registry

import (
	"slices"
	"strings"

	"github.com/meshdns/meshdns/pkg/nametable"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// ToNameInfo converts a domain entry into its wire form. It is the control
// plane's only converter from nametable.Entry to meshdns.v1.NameInfo, so
// every source produces identical bytes for identical entries (version IDs
// are hashes of those bytes). Slices are copied; the result shares nothing
// with e.
func ToNameInfo(e nametable.Entry) *meshdnsv1.NameInfo {
	ni := &meshdnsv1.NameInfo{
		Registry:      e.Registry,
		Shortname:     e.ShortName,
		Namespace:     e.Namespace,
		CanonicalName: trimDot(e.CanonicalName),
		Ttl:           e.TTL,
	}
	if len(e.IPs) > 0 {
		ni.Ips = make([]string, len(e.IPs))
		for i, ip := range e.IPs {
			ni.Ips[i] = ip.Unmap().String()
		}
	}
	if len(e.AltHosts) > 0 {
		ni.AltHosts = make([]string, len(e.AltHosts))
		for i, h := range e.AltHosts {
			ni.AltHosts[i] = trimDot(h)
		}
	}
	if len(e.Ports) > 0 {
		ni.Ports = make([]*meshdnsv1.Port, len(e.Ports))
		for i, p := range e.Ports {
			ni.Ports[i] = &meshdnsv1.Port{Name: p.Name, Port: uint32(p.Port), Protocol: p.Protocol}
		}
	}
	if len(e.Endpoints) > 0 {
		ni.Endpoints = make([]*meshdnsv1.Endpoint, len(e.Endpoints))
		for i, ep := range e.Endpoints {
			// Zone and ForZones are fields an older agent skips.
			pe := &meshdnsv1.Endpoint{Hostname: ep.Hostname, Zone: ep.Zone, ForZones: slices.Clone(ep.ForZones)}
			if len(ep.IPs) > 0 {
				pe.Ips = make([]string, len(ep.IPs))
				for j, ip := range ep.IPs {
					pe.Ips[j] = ip.Unmap().String()
				}
			}
			ni.Endpoints[i] = pe
		}
	}
	return ni
}

// CanonicalHost is the form of a hostname used as a table key: lower case,
// no trailing dot. Agents match names case-insensitively, so two spellings
// of one name must never become two keys.
func CanonicalHost(h string) string {
	return strings.ToLower(trimDot(h))
}

func trimDot(s string) string { return strings.TrimSuffix(s, ".") }
