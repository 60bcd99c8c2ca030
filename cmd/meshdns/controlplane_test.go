package main

import (
	"context"
	"flag"
	"io"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/meshdns/meshdns/cmd/internal/cli"
	"github.com/meshdns/meshdns/controlplane"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
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
			want: controlplane.Config{GRPCAddr: ":15010", AdminAddr: "127.0.0.1:15014", ClusterDomain: "cluster.local", Debounce: 100 * time.Millisecond, MaxAdmissions: 128, MaxConnectionsPerPeer: 256},
		},
		{
			name: "every flag",
			args: []string{"--grpc-addr", "127.0.0.1:15012", "--admin-addr", "127.0.0.1:9", "--cluster-domain", "corp.local",
				"--entries", "/etc/a.yaml", "--entries", "/etc/dir,/etc/b.yaml", "--vip-cidr", "10.99.0.0/16", "--vip-cidr", "fd00:99::/48",
				"--tls-cert", "tls.crt", "--tls-key", "tls.key", "--client-ca", "ca.crt", "--debounce", "250ms",
				"--state-dir", "/var/lib/meshdns", "--max-admissions", "64", "--max-connections-per-peer", "4096"},
			want: controlplane.Config{GRPCAddr: "127.0.0.1:15012", AdminAddr: "127.0.0.1:9", ClusterDomain: "corp.local",
				Entries:  []string{"/etc/a.yaml", "/etc/dir", "/etc/b.yaml"},
				VIPCIDRs: []netip.Prefix{netip.MustParsePrefix("10.99.0.0/16"), netip.MustParsePrefix("fd00:99::/48")},
				TLSCert:  "tls.crt", TLSKey: "tls.key", ClientCA: "ca.crt", Debounce: 250 * time.Millisecond,
				StateDir: "/var/lib/meshdns", MaxAdmissions: 64, MaxConnectionsPerPeer: 4096},
		},
		{
			name: "environment",
			env: map[string]string{"MESHDNS_ENTRIES": "/cm/entries, /cm/more", "MESHDNS_GRPC_ADDR": ":16010",
				"MESHDNS_VIP_CIDR": "240.1.0.0/16", "MESHDNS_DEBOUNCE": "1s"},
			want: controlplane.Config{GRPCAddr: ":16010", AdminAddr: "127.0.0.1:15014", ClusterDomain: "cluster.local",
				Entries: []string{"/cm/entries", "/cm/more"}, VIPCIDRs: []netip.Prefix{netip.MustParsePrefix("240.1.0.0/16")},
				Debounce: time.Second, MaxAdmissions: 128, MaxConnectionsPerPeer: 256},
		},
		{
			name: "flag beats environment",
			args: []string{"--grpc-addr", ":1"},
			env:  map[string]string{"MESHDNS_GRPC_ADDR": ":2"},
			want: controlplane.Config{GRPCAddr: ":1", AdminAddr: "127.0.0.1:15014", ClusterDomain: "cluster.local", Debounce: 100 * time.Millisecond, MaxAdmissions: 128, MaxConnectionsPerPeer: 256},
		},
		{name: "bad cidr", args: []string{"--vip-cidr", "240.240.0.0"}, wantErr: `--vip-cidr "240.240.0.0"`},
		{name: "bad duration", args: []string{"--debounce", "soon"}, wantErr: `--debounce "soon": want a duration such as 500ms`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			fs := flag.NewFlagSet("controlplane", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			f := newControlPlaneFlags(fs)
			err := cli.ParseFlags(fs, tc.args, nil)
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

// TestControlPlaneCommandServesAgents runs `meshdns controlplane` on the
// sample entries, on free loopback ports, and streams tables to two agents
// of different namespaces over real gRPC.
func TestControlPlaneCommandServesAgents(t *testing.T) {
	grpcAddr, adminAddr := testenv.FreeAddr(t), testenv.FreeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- cli.Dispatch(ctx, []string{"controlplane", "--insecure-allow-unauthenticated", "--entries", "../../examples/entries",
			"--grpc-addr", grpcAddr, "--admin-addr", adminAddr, "--debounce", "10ms", "--log-level", "error"}, io.Discard, io.Discard)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("controlplane: %v", err)
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, err := http.Get("http://" + adminAddr + "/healthz/ready")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	tests := []struct {
		namespace string
		want      map[string]string // hostname -> first IP; "vip" for a 240.240/16 address
	}{
		{namespace: "team-a", want: map[string]string{"api.corp.example": "10.1.2.3", "legacy-billing.corp.example": "vip",
			"*.dev.corp.example": "10.9.0.10", "payroll-db.corp.example": "10.1.5.20", "cache.corp.example": "10.1.6.1"}},
		{namespace: "team-b", want: map[string]string{"api.corp.example": "10.1.2.3", "legacy-billing.corp.example": "vip",
			"*.dev.corp.example": "10.9.0.10", "cache.corp.example": "10.1.6.2"}},
	}
	for _, tc := range tests {
		t.Run(tc.namespace, func(t *testing.T) {
			table := fetchTable(t, grpcAddr, tc.namespace)
			got := map[string]string{}
			for h, ni := range table.GetTable() {
				ip := ni.GetIps()[0]
				if strings.HasPrefix(ip, "240.240.") {
					ip = "vip"
				}
				got[h] = ip
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("table (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]string{"corp.example"}, table.GetAuthoritativeZones()); diff != "" {
				t.Errorf("zones (-want +got):\n%s", diff)
			}
		})
	}
}

// fetchTable opens a stream as an agent of namespace and returns the first
// (full) table.
func fetchTable(t *testing.T, addr, namespace string) *meshdnsv1.NameTable {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := meshdnsv1.NewNameDiscoveryServiceClient(conn).StreamNameTable(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&meshdnsv1.StreamNameTableRequest{Identity: &meshdnsv1.AgentIdentity{Namespace: namespace, PodName: "p"}}); err != nil {
		t.Fatal(err)
	}
	r, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if r.GetFull() == nil {
		t.Fatalf("first response %v is not a full table", r)
	}
	return r.GetFull()
}

// TestControlPlaneFlagsDocumented checks that every flag of
// newControlPlaneFlags is in the Configuration table of
// controlplane/README.md.
func TestControlPlaneFlagsDocumented(t *testing.T) {
	readme, err := os.ReadFile("../../controlplane/README.md")
	if err != nil {
		t.Fatal(err)
	}
	fs := flag.NewFlagSet("controlplane", flag.ContinueOnError)
	newControlPlaneFlags(fs)
	newPolicyFlags(fs)
	fs.VisitAll(func(f *flag.Flag) {
		if !strings.Contains(string(readme), "| `--"+f.Name+"`") {
			t.Errorf("--%s is not in the Configuration table of controlplane/README.md", f.Name)
		}
	})
}
