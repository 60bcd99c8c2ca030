package policy

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// New refuses a policy over a bound with an error that names the bound,
// and compiles one at it.
func TestLimits(t *testing.T) {
	rules := func(n int) []Rule {
		rs := make([]Rule, n)
		for i := range rs {
			rs[i] = Rule{Pattern: fmt.Sprintf("h%d.example.com", i), Action: Allow}
		}
		return rs
	}
	// The longest name a pattern may hold: 253 characters, and its dot.
	longest := strings.Repeat(strings.Repeat("a", 63)+".", 3) + strings.Repeat("b", 61) + "."
	tests := []struct {
		name    string
		cfg     Config
		wantErr string // "": compiles
	}{
		{name: "rules at the limit", cfg: Config{Rules: rules(MaxRules)}},
		{name: "rules over the limit", cfg: Config{Rules: rules(MaxRules + 1)},
			wantErr: "policy has 10001 rules, more than the limit of 10000"},
		{name: "pattern at the limit", cfg: Config{Rules: []Rule{{Pattern: longest}}}},
		{name: "pattern over the limit", cfg: Config{Rules: []Rule{{Pattern: "a" + longest}}},
			wantErr: "pattern of 255 characters, more than the limit of 254"},
		{name: "megabyte pattern", cfg: Config{Rules: []Rule{{Pattern: strings.Repeat("a.", 1<<19)}}},
			wantErr: "pattern of 1048576 characters, more than the limit of 254"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := New(tc.cfg)
			if tc.wantErr == "" {
				if err != nil || p.Len() != len(tc.cfg.Rules) {
					t.Fatalf("New: %v, %d rules", err, p.Len())
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, ErrLimit) {
				t.Fatalf("New: %v, want an ErrLimit naming %q", err, tc.wantErr)
			}
			if len(err.Error()) > 200 {
				t.Errorf("error of %d bytes: the bound, not the input", len(err.Error()))
			}
		})
	}
}
