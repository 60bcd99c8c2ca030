package webhook

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Istio's sidecar takes these numbers in every pod it joins (Istio's
// "Ports used by Istio" and its istio-proxy uid); meshdns's defaults for
// the agent's DNS and admin ports and its uid are three of them, so in a
// pod with both sidecars the second to bind fails and a shared uid would
// exempt each proxy's traffic from the other's capture.
var (
	istioPorts = map[int32]string{
		15000: "Envoy admin", 15001: "outbound capture", 15004: "debug", 15006: "inbound capture",
		15008: "HBONE", 15009: "HBONE", 15020: "merged metrics", 15021: "health", 15053: "DNS proxy",
		15090: "Envoy metrics",
	}
	// istioUID is istio-proxy's uid and gid, which Istio's redirect
	// exempts from capture.
	istioUID int64 = 1337
)

// Names by which a pod shows it has, or is about to get, Istio's sidecar.
const (
	istioProxyName      = "istio-proxy"
	istioStatus         = "sidecar.istio.io/status"
	istioInject         = "sidecar.istio.io/inject"
	AnnotationShiftedBy = "meshdns.io/beside-istio"
)

// IstioNumbers are the agent's ports and ids in a pod with Istio's
// sidecar. Each replaces its field of the Template only when that field
// holds one of Istio's numbers, so numbers chosen apart from Istio's stay.
// A zero field takes the layer below's, like the Template's own (layer).
type IstioNumbers struct {
	DNSPort   int32 `json:"dnsPort,omitempty"`
	AdminPort int32 `json:"adminPort,omitempty"`
	ProxyUID  int64 `json:"proxyUID,omitempty"`
	ProxyGID  int64 `json:"proxyGID,omitempty"`
}

// validate rejects alternatives that clash with Istio themselves, with each
// other or with the probe port, which is never shifted.
func (n IstioNumbers) validate(probePort int32) error {
	var errs []error
	for name, p := range map[string]int32{"dnsPort": n.DNSPort, "adminPort": n.AdminPort} {
		if p <= 0 || p > 65535 {
			errs = append(errs, fmt.Errorf("%s %d out of range", name, p))
		}
		if what, ok := istioPorts[p]; ok {
			errs = append(errs, fmt.Errorf("%s %d is Istio's %s port", name, p, what))
		}
	}
	if n.DNSPort == n.AdminPort || n.DNSPort == probePort || n.AdminPort == probePort {
		errs = append(errs, fmt.Errorf("dnsPort %d, adminPort %d and probePort %d must differ", n.DNSPort, n.AdminPort, probePort))
	}
	for name, id := range map[string]int64{"proxyUID": n.ProxyUID, "proxyGID": n.ProxyGID} {
		if id <= 0 || id > 1<<31-1 {
			errs = append(errs, fmt.Errorf("%s %d must be positive", name, id))
		}
		if id == istioUID {
			errs = append(errs, fmt.Errorf("%s %d is istio-proxy's", name, id))
		}
	}
	return errors.Join(errs...)
}

// withIstio reports whether pod has Istio's sidecar already (Istio's
// injector runs first: the API server calls mutating webhook
// configurations in name order, istio-sidecar-injector before
// meshdns-sidecar-injector) or asks for it with Istio's pod label.
func withIstio(pod *corev1.Pod) bool {
	if _, ok := pod.Annotations[istioStatus]; ok {
		return true
	}
	if v, err := strconv.ParseBool(strings.TrimSpace(pod.Labels[istioInject])); err == nil && v {
		return true
	}
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range cs {
			if c.Name == istioProxyName {
				return true
			}
		}
	}
	return false
}

// besideIstio returns t with every number that is Istio's replaced by its
// alternative, and what it changed ("" when nothing), for the pod's
// annotation.
func (t Template) besideIstio() (Template, string) {
	var changed []string
	if _, ok := istioPorts[t.DNSPort]; ok {
		t.DNSPort = t.BesideIstio.DNSPort
		changed = append(changed, "dnsPort="+strconv.Itoa(int(t.DNSPort)))
	}
	if _, ok := istioPorts[t.AdminPort]; ok {
		t.AdminPort = t.BesideIstio.AdminPort
		changed = append(changed, "adminPort="+strconv.Itoa(int(t.AdminPort)))
	}
	if t.ProxyUID == istioUID {
		t.ProxyUID = t.BesideIstio.ProxyUID
		changed = append(changed, "proxyUID="+strconv.FormatInt(t.ProxyUID, 10))
	}
	if t.ProxyGID == istioUID {
		t.ProxyGID = t.BesideIstio.ProxyGID
		changed = append(changed, "proxyGID="+strconv.FormatInt(t.ProxyGID, 10))
	}
	return t, strings.Join(changed, ",")
}
