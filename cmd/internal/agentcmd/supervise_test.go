package agentcmd

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestCutSupervise(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		wantArgs []string
		want     bool
	}{
		{name: "absent", args: []string{"--dns-addr", "127.0.0.1:53"}, wantArgs: []string{"--dns-addr", "127.0.0.1:53"}},
		{name: "double dash", args: []string{"--supervise", "--dns-addr", "127.0.0.1:53"}, wantArgs: []string{"--dns-addr", "127.0.0.1:53"}, want: true},
		{name: "single dash, =true", args: []string{"-supervise=true", "-log-level", "warn"}, wantArgs: []string{"-log-level", "warn"}, want: true},
		{name: "=false", args: []string{"--supervise=false"}, wantArgs: nil},
		{name: "last wins", args: []string{"--supervise", "--ttl", "5", "--supervise=false"}, wantArgs: []string{"--ttl", "5"}},
		{name: "last wins, on", args: []string{"-supervise=false", "--supervise"}, want: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := cutSupervise(tc.args)
			if ok != tc.want {
				t.Errorf("supervise = %v, want %v", ok, tc.want)
			}
			if diff := cmp.Diff(tc.wantArgs, got); diff != "" {
				t.Errorf("args (-want +got):\n%s", diff)
			}
		})
	}
}
