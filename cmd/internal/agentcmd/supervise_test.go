package agentcmd

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/meshdns/meshdns/agent"
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

func TestCrashLoop(t *testing.T) {
	var c crashLoop
	var got []time.Duration
	var safe []bool
	for _, ran := range []time.Duration{time.Second, time.Second, time.Second, time.Second, 11 * time.Second, time.Second} {
		got = append(got, c.crashed(ran))
		safe = append(safe, c.safeMode())
	}
	wantWaits := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, 0, 100 * time.Millisecond}
	if diff := cmp.Diff(wantWaits, got); diff != "" {
		t.Errorf("waits (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]bool{false, false, true, true, false, false}, safe); diff != "" {
		t.Errorf("safe mode after each crash (-want +got):\n%s", diff)
	}
	for range 10 {
		c.crashed(time.Second)
	}
	if w := c.crashed(time.Second); w != 30*time.Second {
		t.Errorf("a long crash loop waits %s, want 30s (safe mode serves meanwhile)", w)
	}
}

func TestSafeUpstreams(t *testing.T) {
	dir := t.TempDir()
	rc := filepath.Join(dir, "resolv.conf")
	if err := os.WriteFile(rc, []byte("nameserver 10.96.0.10\nnameserver 127.0.0.1\nsearch demo.svc.cluster.local\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	vm := filepath.Join(dir, "vm-resolv.conf")
	if err := os.WriteFile(vm, []byte("nameserver 192.0.2.53\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		cfg     agent.Config
		want    []string
		wantErr bool
	}{
		{name: "resolv.conf", cfg: agent.Config{ResolvConf: rc, DNSAddrs: []string{"127.0.0.1:15053"}}, want: []string{"10.96.0.10:53", "127.0.0.1:53"}},
		{name: "own address dropped", cfg: agent.Config{ResolvConf: rc, DNSAddrs: []string{"0.0.0.0:53"}, VMResolvConf: filepath.Join(dir, "none")}, want: []string{"10.96.0.10:53"}},
		{name: "VM resolvers on port 53", cfg: agent.Config{ResolvConf: rc, DNSAddrs: []string{"127.0.0.1:53"}, VMResolvConf: vm}, want: []string{"192.0.2.53:53"}},
		{name: "--upstream wins, tls left out", cfg: agent.Config{ResolvConf: rc, Upstreams: []string{"tls://10.0.0.1:853", "10.0.0.2:53"}}, want: []string{"10.0.0.2:53"}},
		{name: "only tls", cfg: agent.Config{ResolvConf: rc, Upstreams: []string{"tls://10.0.0.1:853"}}, wantErr: true},
		{name: "no resolv.conf", cfg: agent.Config{ResolvConf: filepath.Join(dir, "none")}, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := safeUpstreams(tc.cfg)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("upstreams (-want +got):\n%s", diff)
			}
		})
	}
}
