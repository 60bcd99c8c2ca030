package namewire

import (
	"errors"
	"fmt"
	"slices"
	"strconv"

	"google.golang.org/protobuf/encoding/protowire"
)

// AgentSettings is meshdns.v1.AgentSettings: how the agent behaves beyond
// answering its table. Unlike the rest of the protocol it is decoded
// strictly: a field number or enum number this package does not know,
// anywhere inside it, is an ErrUnknownSetting error, so a setting the
// agent cannot enforce fails the version (NACK) instead of being
// silently ignored.
type AgentSettings struct {
	Policy     *DNSPolicy    `json:"policy,omitempty"` // or nil: allow everything
	Forwarding []ForwardRule `json:"forwarding,omitempty"`
	Telemetry  *Telemetry    `json:"telemetry,omitempty"` // or nil
	// PodZone is the topology zone of the agent's pod; "" when unknown.
	PodZone string `json:"pod_zone,omitempty"`
	// Requires lists the features an agent must implement to apply
	// this version (see Unsupported).
	Requires []string `json:"requires,omitempty"`
}

// DNSPolicy is meshdns.v1.DNSPolicy: which names the workload may
// resolve.
type DNSPolicy struct {
	Rules          []PolicyRule `json:"rules,omitempty"`
	OutsideDefault PolicyAction `json:"outside_default,omitempty"` // unspecified: allow
	TableDefault   PolicyAction `json:"table_default,omitempty"`   // unspecified: allow
	DenyResponse   DenyResponse `json:"deny_response,omitempty"`   // unspecified: NXDOMAIN
	Mode           PolicyMode   `json:"mode,omitempty"`            // unspecified: enforce
	// Source names the objects the policy came from, "ns/name[,ns/name]".
	Source string `json:"source,omitempty"`
}

// PolicyRule is meshdns.v1.PolicyRule: an exact FQDN or "*.suffix."
// pattern (lowercase, trailing dot) and its action.
type PolicyRule struct {
	Pattern string       `json:"pattern,omitempty"`
	Action  PolicyAction `json:"action,omitempty"`
	Source  string       `json:"source,omitempty"`
}

// ForwardRule is meshdns.v1.ForwardRule: domains sent to other upstreams
// (CoreDNS forward syntax: "1.2.3.4", "1.2.3.4:5353", "[::1]:53",
// "tls://1.2.3.4@server.name").
type ForwardRule struct {
	Domains   []string `json:"domains,omitempty"`
	Upstreams []string `json:"upstreams,omitempty"`
	Source    string   `json:"source,omitempty"`
}

// Telemetry is meshdns.v1.Telemetry.
type Telemetry struct {
	QueryLog      *QueryLog      `json:"query_log,omitempty"`      // or nil: no query log
	FailingReport *FailingReport `json:"failing_report,omitempty"` // or nil: no report
}

// QueryLog is meshdns.v1.QueryLog.
type QueryLog struct {
	// Classes logged: "denied", "nxdomain", "servfail", "upstream_error",
	// "all".
	Classes      []string `json:"classes,omitempty"`
	SampleEvery  uint32   `json:"sample_every,omitempty"`   // 0 or 1: every query
	MaxPerSecond uint32   `json:"max_per_second,omitempty"` // 0: the agent's default
}

// FailingReport is meshdns.v1.FailingReport.
type FailingReport struct {
	Enabled       bool   `json:"enabled,omitempty"`
	TopN          uint32 `json:"top_n,omitempty"`          // 0: the agent's default
	WindowSeconds uint32 `json:"window_seconds,omitempty"` // 0: the agent's default
}

// PolicyAction is meshdns.v1.PolicyAction.
type PolicyAction int32

// The PolicyAction values.
const (
	PolicyActionUnspecified PolicyAction = iota
	PolicyActionAllow
	PolicyActionDeny
)

// DenyResponse is meshdns.v1.DenyResponse.
type DenyResponse int32

// The DenyResponse values.
const (
	DenyResponseUnspecified DenyResponse = iota // NXDOMAIN
	DenyResponseNXDOMAIN
	DenyResponseRefused
)

// PolicyMode is meshdns.v1.PolicyMode.
type PolicyMode int32

// The PolicyMode values.
const (
	PolicyModeUnspecified PolicyMode = iota // enforce
	PolicyModeEnforce
	PolicyModeAudit
)

// The enums' value names, by number, as protojson writes and reads them.
var (
	policyActionNames = []string{"POLICY_ACTION_UNSPECIFIED", "POLICY_ACTION_ALLOW", "POLICY_ACTION_DENY"}
	denyResponseNames = []string{"DENY_RESPONSE_UNSPECIFIED", "DENY_RESPONSE_NXDOMAIN", "DENY_RESPONSE_REFUSED"}
	policyModeNames   = []string{"POLICY_MODE_UNSPECIFIED", "POLICY_MODE_ENFORCE", "POLICY_MODE_AUDIT"}
)

func (a PolicyAction) String() string { return enumString(policyActionNames, a) }
func (r DenyResponse) String() string { return enumString(denyResponseNames, r) }
func (m PolicyMode) String() string   { return enumString(policyModeNames, m) }

// MarshalJSON writes the value's name, as protojson does (for the
// /debug/nametable dump).
func (a PolicyAction) MarshalJSON() ([]byte, error) { return strconv.AppendQuote(nil, a.String()), nil }

// MarshalJSON writes the value's name, as protojson does.
func (r DenyResponse) MarshalJSON() ([]byte, error) { return strconv.AppendQuote(nil, r.String()), nil }

// MarshalJSON writes the value's name, as protojson does.
func (m PolicyMode) MarshalJSON() ([]byte, error) { return strconv.AppendQuote(nil, m.String()), nil }

func enumString[E ~int32](names []string, v E) string {
	if v >= 0 && int(v) < len(names) {
		return names[v]
	}
	return strconv.Itoa(int(v))
}

// ErrUnknownSetting is the error of a field or enum value inside
// AgentSettings that this package does not know.
var ErrUnknownSetting = errors.New("unknown setting")

func unknownSetting(what string, num protowire.Number, typ protowire.Type) error {
	return fmt.Errorf("%s: field %d (wire type %d): %w", what, num, typ, ErrUnknownSetting)
}

// checkEnum reports an enum value outside names (proto keeps any int32
// value of an open enum; a setting the agent does not know fails here).
func checkEnum[E ~int32](v E, names []string, what string) error {
	if v < 0 || int(v) >= len(names) {
		return fmt.Errorf("%s: value %d: %w", what, v, ErrUnknownSetting)
	}
	return nil
}

// check rejects the enum values s holds that this package does not know.
// It runs once a message is decoded whole: as in proto, of several values
// of one field only the last counts.
func (s *AgentSettings) check() error {
	p := s.Policy
	if p == nil {
		return nil
	}
	for i := range p.Rules {
		if err := checkEnum(p.Rules[i].Action, policyActionNames, "rule action"); err != nil {
			return err
		}
	}
	return errors.Join(
		checkEnum(p.OutsideDefault, policyActionNames, "policy outside_default"),
		checkEnum(p.TableDefault, policyActionNames, "policy table_default"),
		checkEnum(p.DenyResponse, denyResponseNames, "policy deny_response"),
		checkEnum(p.Mode, policyModeNames, "policy mode"))
}

// Unsupported returns the features s requires that are not in known,
// each once, in the order s lists them: an agent that gets any MUST NACK
// the version. Nil for nil settings.
func (s *AgentSettings) Unsupported(known []string) []string {
	if s == nil {
		return nil
	}
	var out []string
	for _, f := range s.Requires {
		if !slices.Contains(known, f) && !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out
}

// TableSettings decodes the settings of the marshalled NameTable b
// (strictly, see AgentSettings); nil when it has none.
func TableSettings(b []byte) (*AgentSettings, error) {
	var s *AgentSettings
	err := walk(b, "name table", func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		if num != fieldNameTableSettings || typ != protowire.BytesType {
			return nil
		}
		if s == nil {
			s = new(AgentSettings)
		}
		// Merged, as proto merges a repeated embedded message.
		return s.merge(v)
	})
	if err == nil && s != nil {
		err = s.check()
	}
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Unmarshal decodes a marshalled AgentSettings into s, which it resets
// first.
func (s *AgentSettings) Unmarshal(b []byte) error {
	*s = AgentSettings{}
	if err := s.merge(b); err != nil {
		return err
	}
	return s.check()
}

// merge decodes b into s as proto merges a message: scalars replaced,
// lists appended, messages merged. The enums are not checked (check).
func (s *AgentSettings) merge(b []byte) error {
	const what = "settings"
	return walkStrict(b, what, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) (err error) {
		if typ != protowire.BytesType {
			return unknownSetting(what, num, typ)
		}
		switch num {
		case fieldSettingsPolicy:
			if s.Policy == nil {
				s.Policy = new(DNSPolicy)
			}
			return s.Policy.merge(v)
		case fieldSettingsForwarding:
			s.Forwarding = append(s.Forwarding, ForwardRule{})
			return s.Forwarding[len(s.Forwarding)-1].merge(v)
		case fieldSettingsTelemetry:
			if s.Telemetry == nil {
				s.Telemetry = new(Telemetry)
			}
			return s.Telemetry.merge(v)
		case fieldSettingsPodZone:
			s.PodZone, err = str(v, "settings pod_zone")
		case fieldSettingsRequires:
			s.Requires, err = appendStr(s.Requires, v, "settings requires")
		default:
			return unknownSetting(what, num, typ)
		}
		return err
	})
}

func appendStr(to []string, v []byte, what string) ([]string, error) {
	s, err := str(v, what)
	return append(to, s), err
}

func (p *DNSPolicy) merge(b []byte) error {
	const what = "policy"
	return walkStrict(b, what, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) (err error) {
		switch {
		case num == fieldPolicyRules && typ == protowire.BytesType:
			p.Rules = append(p.Rules, PolicyRule{})
			return p.Rules[len(p.Rules)-1].merge(v)
		case num == fieldPolicyOutsideDefault && typ == protowire.VarintType:
			p.OutsideDefault = PolicyAction(int32(x))
		case num == fieldPolicyTableDefault && typ == protowire.VarintType:
			p.TableDefault = PolicyAction(int32(x))
		case num == fieldPolicyDenyResponse && typ == protowire.VarintType:
			p.DenyResponse = DenyResponse(int32(x))
		case num == fieldPolicyMode && typ == protowire.VarintType:
			p.Mode = PolicyMode(int32(x))
		case num == fieldPolicySource && typ == protowire.BytesType:
			p.Source, err = str(v, "policy source")
		default:
			return unknownSetting(what, num, typ)
		}
		return err
	})
}

func (r *PolicyRule) merge(b []byte) error {
	const what = "policy rule"
	return walkStrict(b, what, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) (err error) {
		switch {
		case num == fieldRulePattern && typ == protowire.BytesType:
			r.Pattern, err = str(v, "rule pattern")
		case num == fieldRuleAction && typ == protowire.VarintType:
			r.Action = PolicyAction(int32(x))
		case num == fieldRuleSource && typ == protowire.BytesType:
			r.Source, err = str(v, "rule source")
		default:
			return unknownSetting(what, num, typ)
		}
		return err
	})
}

func (f *ForwardRule) merge(b []byte) error {
	const what = "forward rule"
	return walkStrict(b, what, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) (err error) {
		if typ != protowire.BytesType {
			return unknownSetting(what, num, typ)
		}
		switch num {
		case fieldForwardDomains:
			f.Domains, err = appendStr(f.Domains, v, "forward domains")
		case fieldForwardUpstreams:
			f.Upstreams, err = appendStr(f.Upstreams, v, "forward upstreams")
		case fieldForwardSource:
			f.Source, err = str(v, "forward source")
		default:
			return unknownSetting(what, num, typ)
		}
		return err
	})
}

func (t *Telemetry) merge(b []byte) error {
	const what = "telemetry"
	return walkStrict(b, what, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		switch {
		case num == fieldTelemetryQueryLog && typ == protowire.BytesType:
			if t.QueryLog == nil {
				t.QueryLog = new(QueryLog)
			}
			return t.QueryLog.merge(v)
		case num == fieldTelemetryFailing && typ == protowire.BytesType:
			if t.FailingReport == nil {
				t.FailingReport = new(FailingReport)
			}
			return t.FailingReport.merge(v)
		}
		return unknownSetting(what, num, typ)
	})
}

func (q *QueryLog) merge(b []byte) error {
	const what = "query log"
	return walkStrict(b, what, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) (err error) {
		switch {
		case num == fieldQueryLogClasses && typ == protowire.BytesType:
			q.Classes, err = appendStr(q.Classes, v, "query log classes")
		case num == fieldQueryLogSampleEvery && typ == protowire.VarintType:
			q.SampleEvery = uint32(x)
		case num == fieldQueryLogMaxPerSecond && typ == protowire.VarintType:
			q.MaxPerSecond = uint32(x)
		default:
			return unknownSetting(what, num, typ)
		}
		return err
	})
}

func (r *FailingReport) merge(b []byte) error {
	const what = "failing report"
	return walkStrict(b, what, func(num protowire.Number, typ protowire.Type, _ []byte, x uint64) error {
		if typ != protowire.VarintType {
			return unknownSetting(what, num, typ)
		}
		switch num {
		case fieldReportEnabled:
			r.Enabled = x != 0
		case fieldReportTopN:
			r.TopN = uint32(x)
		case fieldReportWindow:
			r.WindowSeconds = uint32(x)
		default:
			return unknownSetting(what, num, typ)
		}
		return nil
	})
}

// AppendTableSettings appends s as a NameTable's settings field; nothing
// for nil.
func AppendTableSettings(b []byte, s *AgentSettings) []byte {
	if s == nil {
		return b
	}
	return appendMessage(b, fieldNameTableSettings, s.Append)
}

// Append appends s marshalled, as the generated code writes it.
func (s *AgentSettings) Append(b []byte) []byte {
	if p := s.Policy; p != nil {
		b = appendMessage(b, fieldSettingsPolicy, p.append)
	}
	for i := range s.Forwarding {
		b = appendMessage(b, fieldSettingsForwarding, s.Forwarding[i].append)
	}
	if t := s.Telemetry; t != nil {
		b = appendMessage(b, fieldSettingsTelemetry, t.append)
	}
	b = appendString(b, fieldSettingsPodZone, s.PodZone)
	return appendStrings(b, fieldSettingsRequires, s.Requires)
}

// appendEnum appends an enum field unless it is zero; negative values
// are sign-extended to 64 bits, as for int32.
func appendEnum[E ~int32](b []byte, num protowire.Number, v E) []byte {
	return appendVarint(b, num, uint64(int64(v)))
}

func (p *DNSPolicy) append(b []byte) []byte {
	for i := range p.Rules {
		r := &p.Rules[i]
		b = appendMessage(b, fieldPolicyRules, func(b []byte) []byte {
			b = appendString(b, fieldRulePattern, r.Pattern)
			b = appendEnum(b, fieldRuleAction, r.Action)
			return appendString(b, fieldRuleSource, r.Source)
		})
	}
	b = appendEnum(b, fieldPolicyOutsideDefault, p.OutsideDefault)
	b = appendEnum(b, fieldPolicyTableDefault, p.TableDefault)
	b = appendEnum(b, fieldPolicyDenyResponse, p.DenyResponse)
	b = appendEnum(b, fieldPolicyMode, p.Mode)
	return appendString(b, fieldPolicySource, p.Source)
}

func (f *ForwardRule) append(b []byte) []byte {
	b = appendStrings(b, fieldForwardDomains, f.Domains)
	b = appendStrings(b, fieldForwardUpstreams, f.Upstreams)
	return appendString(b, fieldForwardSource, f.Source)
}

func (t *Telemetry) append(b []byte) []byte {
	if q := t.QueryLog; q != nil {
		b = appendMessage(b, fieldTelemetryQueryLog, func(b []byte) []byte {
			b = appendStrings(b, fieldQueryLogClasses, q.Classes)
			b = appendVarint(b, fieldQueryLogSampleEvery, uint64(q.SampleEvery))
			return appendVarint(b, fieldQueryLogMaxPerSecond, uint64(q.MaxPerSecond))
		})
	}
	if r := t.FailingReport; r != nil {
		b = appendMessage(b, fieldTelemetryFailing, func(b []byte) []byte {
			if r.Enabled {
				b = appendVarint(b, fieldReportEnabled, 1)
			}
			b = appendVarint(b, fieldReportTopN, uint64(r.TopN))
			return appendVarint(b, fieldReportWindow, uint64(r.WindowSeconds))
		})
	}
	return b
}
