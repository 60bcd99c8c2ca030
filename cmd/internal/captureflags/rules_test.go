package captureflags

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/meshdns/meshdns/cmd/internal/cli"
	"github.com/meshdns/meshdns/iptables"
)

func TestRulesConfig(t *testing.T) {
	dir := t.TempDir()
	rc := filepath.Join(dir, "resolv.conf")
	if err := os.WriteFile(rc, []byte("nameserver 10.96.0.10\nnameserver fd00::10\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty.conf")
	if err := os.WriteFile(empty, []byte("search demo.svc.cluster.local\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		rules   Rules
		want    iptables.Config
		wantErr string
	}{
		{
			name:  "nameservers of resolv.conf",
			rules: Rules{Port: 15053, UIDs: cli.StringList{"1337"}, ResolvConf: rc, Backend: "auto"},
			want: iptables.Config{ProxyPort: 15053, ProxyUIDs: []uint32{1337}, Backend: iptables.Auto,
				Nameservers: []netip.Addr{netip.MustParseAddr("10.96.0.10"), netip.MustParseAddr("fd00::10")}},
		},
		{
			name:  "capture all reads no resolv.conf",
			rules: Rules{Port: 53, GIDs: cli.StringList{"1337", "1338"}, ResolvConf: filepath.Join(dir, "missing"), CaptureAll: true, Backend: "nft", NoIPv6: true},
			want:  iptables.Config{ProxyPort: 53, ProxyGIDs: []uint32{1337, 1338}, CaptureAllDNS: true, Backend: iptables.NFT, DisableIPv6: true},
		},
		{name: "native for the init container", rules: Rules{Port: 15053, Backend: BackendNative}, want: iptables.Config{ProxyPort: 15053, Backend: iptables.Auto}},
		{name: "native for the drift check", rules: Rules{Prefix: "iptables-", Backend: BackendNative}, wantErr: "--iptables-backend native: the drift check reads the rules with the iptables tools"},
		{name: "unknown backend", rules: Rules{Backend: "ebpf"}, wantErr: "(or native)"},
		{name: "uid not a number", rules: Rules{Prefix: "iptables-", Backend: "auto", UIDs: cli.StringList{"agent"}}, wantErr: `--iptables-proxy-uid "agent": not a numeric id`},
		{name: "missing resolv.conf", rules: Rules{Backend: "auto", ResolvConf: filepath.Join(dir, "missing")}, wantErr: "--resolv-conf " + filepath.Join(dir, "missing") + ": no such file or directory"},
		{name: "resolv.conf without nameservers", rules: Rules{Backend: "auto", ResolvConf: empty}, wantErr: "--resolv-conf " + empty + ": "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.rules.Config()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateComparable(netip.Addr{})); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
}
