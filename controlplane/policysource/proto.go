package policysource

import (
	"github.com/meshdns/meshdns/internal/namewire"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// toProto converts a merged policy to the message the settings carry;
// nil stays nil. The enums have the same numbers on both sides.
func toProto(d *namewire.DNSPolicy) *meshdnsv1.DNSPolicy {
	if d == nil {
		return nil
	}
	p := &meshdnsv1.DNSPolicy{
		Rules:          make([]*meshdnsv1.PolicyRule, len(d.Rules)),
		OutsideDefault: meshdnsv1.PolicyAction(d.OutsideDefault),
		TableDefault:   meshdnsv1.PolicyAction(d.TableDefault),
		DenyResponse:   meshdnsv1.DenyResponse(d.DenyResponse),
		Mode:           meshdnsv1.PolicyMode(d.Mode),
		Source:         d.Source,
	}
	rules := make([]meshdnsv1.PolicyRule, len(d.Rules)) // one allocation for all
	for i, r := range d.Rules {
		rules[i].Pattern, rules[i].Action, rules[i].Source = r.Pattern, meshdnsv1.PolicyAction(r.Action), r.Source
		p.Rules[i] = &rules[i]
	}
	return p
}
