package main

import (
	"flag"
	"io"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/meshdns/meshdns/controlplane"
)

func TestControlPlaneFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		want    controlplane.Config
		wantErr string
	}{
		{
			name: "defaults",
			want: controlplane.Config{GRPCAddr: ":15010", AdminAddr: ":15014", ClusterDomain: "cluster.local", Debounce: 100 * time.Millisecond},
		},
		{
			name: "every flag",
			args: []string{"--grpc-addr", "127.0.0.1:15012", "--admin-addr", "127.0.0.1:9", "--cluster-domain", "corp.local",
				"--entries", "/etc/a.yaml", "--entries", "/etc/dir,/etc/b.yaml", "--vip-cidr", "10.99.0.0/16", "--vip-cidr", "fd00:99::/48",
				"--tls-cert", "tls.crt", "--tls-key", "tls.key", "--client-ca", "ca.crt", "--debounce", "250ms"},
			want: controlplane.Config{GRPCAddr: "127.0.0.1:15012", AdminAddr: "127.0.0.1:9", ClusterDomain: "corp.local",
				Entries:  []string{"/etc/a.yaml", "/etc/dir", "/etc/b.yaml"},
				VIPCIDRs: []netip.Prefix{netip.MustParsePrefix("10.99.0.0/16"), netip.MustParsePrefix("fd00:99::/48")},
				TLSCert:  "tls.crt", TLSKey: "tls.key", ClientCA: "ca.crt", Debounce: 250 * time.Millisecond},
		},
		{
			name: "environment",
			env: map[string]string{"MESHDNS_ENTRIES": "/cm/entries, /cm/more", "MESHDNS_GRPC_ADDR": ":16010",
				"MESHDNS_VIP_CIDR": "240.1.0.0/16", "MESHDNS_DEBOUNCE": "1s"},
			want: controlplane.Config{GRPCAddr: ":16010", AdminAddr: ":15014", ClusterDomain: "cluster.local",
				Entries: []string{"/cm/entries", "/cm/more"}, VIPCIDRs: []netip.Prefix{netip.MustParsePrefix("240.1.0.0/16")},
				Debounce: time.Second},
		},
		{
			name: "flag beats environment",
			args: []string{"--grpc-addr", ":1"},
			env:  map[string]string{"MESHDNS_GRPC_ADDR": ":2"},
			want: controlplane.Config{GRPCAddr: ":1", AdminAddr: ":15014", ClusterDomain: "cluster.local", Debounce: 100 * time.Millisecond},
		},
		{name: "bad cidr", args: []string{"--vip-cidr", "240.240.0.0"}, wantErr: `--vip-cidr "240.240.0.0"`},
		{name: "bad duration", args: []string{"--debounce", "soon"}, wantErr: "invalid value"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			fs := flag.NewFlagSet("controlplane", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			f := newControlPlaneFlags(fs)
			err := parseFlags(fs, tc.args, nil)
			var got controlplane.Config
			if err == nil {
				got, err = f.config(nil, nil)
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateComparable(netip.Prefix{}), cmpopts.IgnoreFields(controlplane.Config{}, "Logger", "Level")); diff != "" {
				t.Errorf("config (-want +got):\n%s", diff)
			}
		})
	}
}
