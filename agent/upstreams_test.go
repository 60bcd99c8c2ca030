package agent

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestReadResolvInputs(t *testing.T) {
	dir := t.TempDir()
	pod := writeFile(t, dir, "pod.conf", "nameserver 10.96.0.10\nnameserver fd00::10\nsearch demo.svc.cluster.local svc.cluster.local\noptions ndots:5\n")
	vmEtc := writeFile(t, dir, "vm-etc.conf", "nameserver 127.0.0.1\nsearch corp.example\n")
	vmSaved := writeFile(t, dir, "vm-saved.conf", "nameserver 192.0.2.53\nnameserver 192.0.2.54\n")
	missing := filepath.Join(dir, "missing.conf")

	tests := []struct {
		name    string
		cfg     Config
		want    resolvInputs
		wantErr string
	}{
		{
			name: "pod resolv.conf",
			cfg:  Config{ResolvConf: pod, VMResolvConf: vmSaved, DNSAddrs: []string{"127.0.0.1:15053"}},
			want: resolvInputs{Upstreams: []string{"10.96.0.10:53", "[fd00::10]:53"},
				Search: []string{"demo.svc.cluster.local", "svc.cluster.local"}, Ndots: 5, ClientTimeout: 5 * time.Second, From: pod},
		},
		{
			name: "--upstream overrides nameservers but keeps the search list",
			cfg:  Config{ResolvConf: pod, Upstreams: []string{"127.0.0.1:5353"}, DNSAddrs: []string{"127.0.0.1:15053"}},
			want: resolvInputs{Upstreams: []string{"127.0.0.1:5353"},
				Search: []string{"demo.svc.cluster.local", "svc.cluster.local"}, Ndots: 5, ClientTimeout: 5 * time.Second, From: "--upstream"},
		},
		{
			name: "VM on port 53 takes the saved resolv.conf",
			cfg:  Config{ResolvConf: vmEtc, VMResolvConf: vmSaved, DNSAddrs: []string{"127.0.0.1:53"}},
			want: resolvInputs{Upstreams: []string{"192.0.2.53:53", "192.0.2.54:53"},
				Search: []string{"corp.example"}, Ndots: 1, ClientTimeout: 5 * time.Second, From: vmSaved},
		},
		{
			name:    "port 53 without the saved file drops itself and finds nothing",
			cfg:     Config{ResolvConf: vmEtc, VMResolvConf: missing, DNSAddrs: []string{"127.0.0.1:53"}},
			wantErr: "no upstream nameserver",
		},
		{
			name:    "unspecified listen address covers loopback nameservers",
			cfg:     Config{ResolvConf: vmEtc, VMResolvConf: missing, DNSAddrs: []string{"0.0.0.0:53"}},
			wantErr: "no upstream nameserver",
		},
		{
			name: "other port is not a loop",
			cfg:  Config{ResolvConf: vmEtc, VMResolvConf: vmSaved, DNSAddrs: []string{"127.0.0.1:15053"}},
			want: resolvInputs{Upstreams: []string{"127.0.0.1:53"}, Search: []string{"corp.example"}, Ndots: 1, ClientTimeout: 5 * time.Second, From: vmEtc},
		},
		{
			name:    "missing resolv.conf",
			cfg:     Config{ResolvConf: missing, DNSAddrs: []string{"127.0.0.1:15053"}},
			wantErr: "read resolv.conf",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := readResolvInputs(tt.cfg)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
}

func TestConfigRejects(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		wantErr string
	}{
		{name: "file and control plane", cfg: Config{NameTableFile: "t.json", ControlPlanes: []string{"cp:15010"}}, wantErr: "exclude each other"},
		{name: "upstream hostname", cfg: Config{Upstreams: []string{"dns.example:53"}}, wantErr: "want IP[:port]"},
		{name: "dns address without port", cfg: Config{DNSAddrs: []string{"127.0.0.1"}}, wantErr: "dns address"},
		{name: "bad cluster domain", cfg: Config{ClusterDomain: "a..b"}, wantErr: "cluster domain"},
		{name: "cert without key", cfg: Config{TLSCert: "c.pem"}, wantErr: "go together"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want %q", err, tt.wantErr)
			}
		})
	}
}

func TestWithV6Listener(t *testing.T) {
	def := []string{"127.0.0.1:15053"}
	tests := []struct {
		name      string
		upstreams []string
		v6        bool
		want      []string
	}{
		{name: "v4 upstreams", upstreams: []string{"10.96.0.10:53"}, v6: true, want: def},
		{name: "v6 upstream", upstreams: []string{"10.96.0.10:53", "[fd00::10]:53"}, v6: true, want: []string{"127.0.0.1:15053", "[::1]:15053"}},
		{name: "v6 upstream without v6 loopback", upstreams: []string{"[fd00::10]:53"}, v6: false, want: def},
		{name: "v4-mapped is v4", upstreams: []string{"[::ffff:10.0.0.1]:53"}, v6: true, want: def},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, withV6Listener(def, tt.upstreams, tt.v6)); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
}
