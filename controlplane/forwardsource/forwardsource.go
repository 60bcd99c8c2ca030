// Package forwardsource is the control plane's part of the agents'
// settings (agentsettings.Part) that sends stub domains to the agents of
// the workloads a rule selects: names under corp.example go to the corp
// resolvers for the pods of one namespace, or only those with a label,
// and everything else as before. Rules come from a file (a ConfigMap
// mounted into the control plane) in the form ParseFile reads.
package forwardsource

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/meshdns/meshdns/internal/dnsname"
	"github.com/meshdns/meshdns/pkg/proxy/upstream"
)

// Rule sends Domains to Upstreams for the agents it selects.
type Rule struct {
	// Name identifies the rule in the agents' settings (ForwardRule.source
	// "file/<name>") and in errors.
	Name string
	// Namespaces the rule applies to; empty means every namespace.
	Namespaces []string
	// Selector picks pods by label within those namespaces; nil means
	// every pod.
	Selector labels.Selector
	// Domains, lowercase without the trailing dot; "." is every name.
	Domains []string
	// Upstreams in their canonical spelling (upstream.Addr.String).
	Upstreams []string
}

// fileForm is the file's JSON/YAML shape.
type fileForm struct {
	Rules []struct {
		Name        string                `json:"name"`
		Namespaces  []string              `json:"namespaces"`
		PodSelector *metav1.LabelSelector `json:"podSelector"`
		Domains     []string              `json:"domains"`
		Upstreams   []string              `json:"upstreams"`
	} `json:"rules"`
}

// ErrInvalid wraps every reason ParseFile rejects a file.
var ErrInvalid = errors.New("invalid forwarding rules")

// ParseFile reads rules (YAML or JSON):
//
//	rules:
//	- name: corp
//	  namespaces: [team-a]            # optional: every namespace
//	  podSelector:                    # optional: every pod
//	    matchLabels: {app: web}
//	  domains: [corp.example]
//	  upstreams: [10.0.0.53, "tls://10.0.0.54@dns.corp.example"]
//
// Every rule needs a unique name, domains and upstreams; domains must be
// names, upstreams what the agent takes (upstream.ParseAddr: IP[:port] or
// tls://IP[:port][@server.name]). Unknown fields are errors: a misspelt
// podSelector must not widen a rule to every pod. The whole file fails on
// any error.
func ParseFile(data []byte) ([]Rule, error) {
	var f fileForm
	if err := yaml.UnmarshalStrict(data, &f); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	var (
		out  []Rule
		errs []error
	)
	for i, fr := range f.Rules {
		r := Rule{Name: fr.Name, Namespaces: fr.Namespaces}
		bad := func(format string, args ...any) {
			errs = append(errs, fmt.Errorf("rule %d (%q): %s", i, fr.Name, fmt.Sprintf(format, args...)))
		}
		switch {
		case fr.Name == "":
			bad("needs a name")
		case slices.ContainsFunc(out, func(o Rule) bool { return o.Name == fr.Name }):
			bad("name given twice")
		}
		if len(fr.Domains) == 0 || len(fr.Upstreams) == 0 {
			bad("needs domains and upstreams")
		}
		for _, ns := range fr.Namespaces {
			if err := dnsname.CheckLabel(ns); err != nil || ns != strings.ToLower(ns) {
				bad("namespace %q is not a namespace name", ns)
			}
		}
		if fr.PodSelector != nil {
			sel, err := metav1.LabelSelectorAsSelector(fr.PodSelector)
			if err != nil {
				bad("podSelector: %v", err)
			}
			r.Selector = sel
		}
		for _, d := range fr.Domains {
			d = strings.ToLower(strings.TrimSuffix(d, "."))
			if d == "" {
				d = "." // every name, as CoreDNS's "forward ."
			} else if err := dnsname.Check(d, false); err != nil {
				bad("domain %q: %v", d, err)
				continue
			}
			r.Domains = append(r.Domains, d)
		}
		for _, u := range fr.Upstreams {
			a, err := upstream.ParseAddr(u)
			if err != nil {
				bad("%v", err)
				continue
			}
			r.Upstreams = append(r.Upstreams, a.String())
		}
		out = append(out, r)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, errors.Join(errs...))
	}
	return out, nil
}
