package safemode

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshdns/meshdns/internal/namewire"
)

func TestReadPolicy(t *testing.T) {
	tests := []struct {
		name      string
		stateDir  func(t *testing.T) string
		enforcing bool
		why       string
	}{
		{name: "no state dir", stateDir: func(*testing.T) string { return "" }, why: "no --state-dir"},
		{name: "no state file", stateDir: func(t *testing.T) string { return t.TempDir() }, why: "no state file"},
		{
			name: "no settings",
			stateDir: func(t *testing.T) string {
				d := t.TempDir()
				writeState(t, d, nil)
				return d
			},
			why: "no DNS policy",
		},
		{
			name: "settings without a policy",
			stateDir: func(t *testing.T) string {
				d := t.TempDir()
				writeState(t, d, &namewire.AgentSettings{PodZone: "z1"})
				return d
			},
			why: "no DNS policy",
		},
		{
			name: "audit policy",
			stateDir: func(t *testing.T) string {
				d := t.TempDir()
				writeState(t, d, &namewire.AgentSettings{Policy: &namewire.DNSPolicy{Mode: namewire.PolicyModeAudit}})
				return d
			},
			why: "only audits",
		},
		{
			name: "enforcing policy",
			stateDir: func(t *testing.T) string {
				d := t.TempDir()
				writeState(t, d, &namewire.AgentSettings{Policy: &namewire.DNSPolicy{Mode: namewire.PolicyModeEnforce, Source: "demo/deny-all"}})
				return d
			},
			enforcing: true, why: "demo/deny-all",
		},
		{
			name: "policy, mode unspecified (enforce)",
			stateDir: func(t *testing.T) string {
				d := t.TempDir()
				writeState(t, d, &namewire.AgentSettings{Policy: &namewire.DNSPolicy{OutsideDefault: namewire.PolicyActionDeny}})
				return d
			},
			enforcing: true, why: "enforces",
		},
		{
			name: "garbage: fail closed",
			stateDir: func(t *testing.T) string {
				d := t.TempDir()
				os.WriteFile(filepath.Join(d, StateFile), []byte{0xff, 0xff, 0xff}, 0o600)
				return d
			},
			enforcing: true, why: "failing closed",
		},
		{
			name: "truncated: fail closed",
			stateDir: func(t *testing.T) string {
				d := t.TempDir()
				writeState(t, d, &namewire.AgentSettings{Policy: &namewire.DNSPolicy{Mode: namewire.PolicyModeAudit}})
				p := filepath.Join(d, StateFile)
				b, _ := os.ReadFile(p)
				os.WriteFile(p, b[:len(b)-2], 0o600)
				return d
			},
			enforcing: true, why: "failing closed",
		},
		{
			name: "no table: fail closed",
			stateDir: func(t *testing.T) string {
				d := t.TempDir()
				os.WriteFile(filepath.Join(d, StateFile), []byte{0x0a, 0x01, 'v'}, 0o600)
				return d
			},
			enforcing: true, why: "failing closed",
		},
		{
			name: "unreadable: fail closed",
			stateDir: func(t *testing.T) string {
				d := t.TempDir()
				os.Mkdir(filepath.Join(d, StateFile), 0o700) // a directory: open works, read fails
				return d
			},
			enforcing: true, why: "failing closed",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := ReadPolicy(tc.stateDir(t))
			if p.Enforcing != tc.enforcing || !strings.Contains(p.Why, tc.why) {
				t.Errorf("ReadPolicy = %+v, want enforcing %v and a why containing %q", p, tc.enforcing, tc.why)
			}
		})
	}
}
