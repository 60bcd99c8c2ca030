package main

import (
	"fmt"

	"github.com/meshdns/meshdns/pkg/policy"
	"github.com/meshdns/meshdns/pkg/proxy"
)

// benchPolicy is a DNS policy of n rules (nil for 0) under which every
// scenario's answer is still allowed: the scenarios' outside names
// (host<i>.example.com) by one wildcard, the table's by the table
// default, and n-1 rules for other names, half exact, half wildcards,
// so that a decision probes maps of the full size. Outside names no rule
// matches are denied.
func benchPolicy(n int) (*proxy.Policy, error) {
	if n <= 0 {
		return nil, nil
	}
	rules := []policy.Rule{{Pattern: "*.example.com", Action: policy.Allow}}
	for i := 1; i < n; i++ {
		pat := fmt.Sprintf("api%d.vendor%d.example.net", i, i%97)
		if i%2 == 1 {
			pat = fmt.Sprintf("*.bucket%d.example.org", i)
		}
		rules = append(rules, policy.Rule{Pattern: pat, Action: policy.Allow})
	}
	return proxy.NewPolicy(policy.Config{Rules: rules, OutsideDefault: policy.Deny}, nil)
}
