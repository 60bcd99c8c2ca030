package cni

import (
	"encoding/json"
	"errors"
	"fmt"
)

// AnnotationRedirect marks a pod whose redirect the CNI plugin programs,
// and says how. The webhook sets it in CNI mode instead of adding the
// iptables init container; its value is the JSON of Redirect.
const AnnotationRedirect = "meshdns.io/cni-redirect"

// Redirect is what the plugin needs to know about the pod's agent, the same
// values the init container gets as flags.
type Redirect struct {
	// ProxyUID and ProxyGID run the agent: their traffic is never
	// redirected. At least one is positive.
	ProxyUID int64 `json:"proxyUID,omitempty"`
	ProxyGID int64 `json:"proxyGID,omitempty"`
	// DNSPort is the agent's DNS port on 127.0.0.1 and ::1.
	DNSPort int32 `json:"dnsPort"`
}

// String is the annotation value.
func (r Redirect) String() string {
	b, _ := json.Marshal(r) // a struct of integers always marshals
	return string(b)
}

// ParseRedirect reads an annotation value. The pod's owner writes it, so it
// is checked as untrusted input: it can only change the rules of the pod's
// own network namespace, and never with an id the API server would refuse.
func ParseRedirect(s string) (Redirect, error) {
	var r Redirect
	if err := json.Unmarshal([]byte(s), &r); err != nil {
		return Redirect{}, fmt.Errorf("parse %s: %w", AnnotationRedirect, err)
	}
	var errs []error
	if r.ProxyUID <= 0 && r.ProxyGID <= 0 {
		errs = append(errs, errors.New("no positive proxyUID or proxyGID"))
	}
	if r.ProxyUID < 0 || r.ProxyGID < 0 || r.ProxyUID > 1<<31-1 || r.ProxyGID > 1<<31-1 {
		errs = append(errs, fmt.Errorf("proxyUID %d or proxyGID %d out of range", r.ProxyUID, r.ProxyGID))
	}
	if r.DNSPort <= 0 || r.DNSPort > 65535 {
		errs = append(errs, fmt.Errorf("dnsPort %d out of range", r.DNSPort))
	}
	if err := errors.Join(errs...); err != nil {
		return Redirect{}, fmt.Errorf("%s %q: %w", AnnotationRedirect, s, err)
	}
	return r, nil
}
