package namewire

import (
	"fmt"
	"slices"
)

// The JSON form of AgentSettings is protojson's, read with the same rules
// as a NameInfo (json.go) and two more: enums as a value's name or its
// number, bools as true or false. As in the binary form, an unknown field
// or enum value is an error (protojson rejects unknown fields too, but
// accepts any enum number).

// The settings messages' fields by each name protojson accepts.
var (
	jsonSettingsField = map[string]int{"policy": fieldSettingsPolicy, "forwarding": fieldSettingsForwarding,
		"telemetry": fieldSettingsTelemetry, "podZone": fieldSettingsPodZone, "pod_zone": fieldSettingsPodZone,
		"requires": fieldSettingsRequires}
	jsonPolicyField = map[string]int{"rules": fieldPolicyRules,
		"outsideDefault": fieldPolicyOutsideDefault, "outside_default": fieldPolicyOutsideDefault,
		"tableDefault": fieldPolicyTableDefault, "table_default": fieldPolicyTableDefault,
		"denyResponse": fieldPolicyDenyResponse, "deny_response": fieldPolicyDenyResponse,
		"mode": fieldPolicyMode, "source": fieldPolicySource}
	jsonRuleField      = map[string]int{"pattern": fieldRulePattern, "action": fieldRuleAction, "source": fieldRuleSource}
	jsonForwardField   = map[string]int{"domains": fieldForwardDomains, "upstreams": fieldForwardUpstreams, "source": fieldForwardSource}
	jsonTelemetryField = map[string]int{"queryLog": fieldTelemetryQueryLog, "query_log": fieldTelemetryQueryLog,
		"failingReport": fieldTelemetryFailing, "failing_report": fieldTelemetryFailing}
	jsonQueryLogField = map[string]int{"classes": fieldQueryLogClasses,
		"sampleEvery": fieldQueryLogSampleEvery, "sample_every": fieldQueryLogSampleEvery,
		"maxPerSecond": fieldQueryLogMaxPerSecond, "max_per_second": fieldQueryLogMaxPerSecond}
	jsonReportField = map[string]int{"enabled": fieldReportEnabled, "topN": fieldReportTopN, "top_n": fieldReportTopN,
		"windowSeconds": fieldReportWindow, "window_seconds": fieldReportWindow}
)

func (s *jscan) settings(out *AgentSettings) error {
	return s.fields(jsonSettingsField, func(num int) (err error) {
		switch num {
		case fieldSettingsPolicy:
			out.Policy = new(DNSPolicy)
			err = s.policy(out.Policy)
		case fieldSettingsForwarding:
			err = s.array(func() error {
				out.Forwarding = append(out.Forwarding, ForwardRule{})
				return s.forward(&out.Forwarding[len(out.Forwarding)-1])
			})
		case fieldSettingsTelemetry:
			out.Telemetry = new(Telemetry)
			err = s.telemetry(out.Telemetry)
		case fieldSettingsPodZone:
			out.PodZone, err = s.str()
		case fieldSettingsRequires:
			out.Requires, err = s.strings(out.Requires)
		}
		return err
	})
}

func (s *jscan) policy(p *DNSPolicy) error {
	return s.fields(jsonPolicyField, func(num int) (err error) {
		switch num {
		case fieldPolicyRules:
			err = s.array(func() error {
				p.Rules = append(p.Rules, PolicyRule{})
				r := &p.Rules[len(p.Rules)-1]
				return s.fields(jsonRuleField, func(num int) (err error) {
					switch num {
					case fieldRulePattern:
						r.Pattern, err = s.str()
					case fieldRuleAction:
						r.Action, err = jsonEnum[PolicyAction](s, policyActionNames)
					case fieldRuleSource:
						r.Source, err = s.str()
					}
					return err
				})
			})
		case fieldPolicyOutsideDefault:
			p.OutsideDefault, err = jsonEnum[PolicyAction](s, policyActionNames)
		case fieldPolicyTableDefault:
			p.TableDefault, err = jsonEnum[PolicyAction](s, policyActionNames)
		case fieldPolicyDenyResponse:
			p.DenyResponse, err = jsonEnum[DenyResponse](s, denyResponseNames)
		case fieldPolicyMode:
			p.Mode, err = jsonEnum[PolicyMode](s, policyModeNames)
		case fieldPolicySource:
			p.Source, err = s.str()
		}
		return err
	})
}

func (s *jscan) forward(f *ForwardRule) error {
	return s.fields(jsonForwardField, func(num int) (err error) {
		switch num {
		case fieldForwardDomains:
			f.Domains, err = s.strings(f.Domains)
		case fieldForwardUpstreams:
			f.Upstreams, err = s.strings(f.Upstreams)
		case fieldForwardSource:
			f.Source, err = s.str()
		}
		return err
	})
}

func (s *jscan) telemetry(t *Telemetry) error {
	return s.fields(jsonTelemetryField, func(num int) error {
		if num == fieldTelemetryQueryLog {
			q := new(QueryLog)
			t.QueryLog = q
			return s.fields(jsonQueryLogField, func(num int) (err error) {
				switch num {
				case fieldQueryLogClasses:
					q.Classes, err = s.strings(q.Classes)
				case fieldQueryLogSampleEvery:
					q.SampleEvery, err = s.uint32()
				case fieldQueryLogMaxPerSecond:
					q.MaxPerSecond, err = s.uint32()
				}
				return err
			})
		}
		r := new(FailingReport)
		t.FailingReport = r
		return s.fields(jsonReportField, func(num int) (err error) {
			switch num {
			case fieldReportEnabled:
				r.Enabled, err = s.boolean()
			case fieldReportTopN:
				r.TopN, err = s.uint32()
			case fieldReportWindow:
				r.WindowSeconds, err = s.uint32()
			}
			return err
		})
	})
}

// jsonEnum reads an enum value as protojson does, a value's name or its
// number, and rejects values not in names.
func jsonEnum[E ~int32](s *jscan, names []string) (E, error) {
	if s.peek() == '"' {
		v, err := s.str()
		if err != nil {
			return 0, err
		}
		if i := slices.Index(names, v); i >= 0 {
			return E(i), nil
		}
		return 0, fmt.Errorf("invalid enum value %q", v)
	}
	text, err := s.number()
	if err != nil {
		return 0, fmt.Errorf("invalid enum value: %w", err)
	}
	if n, ok := integer(text); ok && int64(n) < int64(len(names)) {
		return E(n), nil
	}
	return 0, fmt.Errorf("enum value %s: %w", text, ErrUnknownSetting)
}

// boolean reads true or false.
func (s *jscan) boolean() (bool, error) {
	for _, lit := range []string{"true", "false"} {
		if s.peek() == lit[0] && len(s.b)-s.i >= len(lit) && string(s.b[s.i:s.i+len(lit)]) == lit {
			s.i += len(lit)
			if s.i < len(s.b) && notDelim(s.b[s.i]) {
				return false, s.errorf("invalid literal")
			}
			return lit == "true", nil
		}
	}
	return false, s.unexpected("true or false")
}
