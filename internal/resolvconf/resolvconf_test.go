package resolvconf_test

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meshdns/meshdns/internal/resolvconf"
)

func addrs(s ...string) []netip.Addr {
	var out []netip.Addr
	for _, a := range s {
		out = append(out, netip.MustParseAddr(a))
	}
	return out
}

func TestParse(t *testing.T) {
	tests := []struct {
		name      string
		in        string
		want      resolvconf.Config
		hostPorts []string
		addrs     []netip.Addr
		wantErr   string
	}{
		{
			name: "kubernetes pod",
			in: "search demo.svc.cluster.local svc.cluster.local cluster.local\n" +
				"nameserver 10.96.0.10\noptions ndots:5\n",
			want: resolvconf.Config{
				Nameservers: addrs("10.96.0.10"),
				Search:      []string{"demo.svc.cluster.local", "svc.cluster.local", "cluster.local"},
				Ndots:       5,
				Timeout:     5,
			},
			hostPorts: []string{"10.96.0.10:53"},
			addrs:     addrs("10.96.0.10"),
		},
		{
			name: "ipv6, scoped, mapped and repeated nameservers",
			in:   "nameserver fd00::10\nnameserver fe80::1%eth0\nnameserver 127.0.0.53\nnameserver ::ffff:127.0.0.53\nnameserver fd00::10\n",
			want: resolvconf.Config{
				Nameservers: addrs("fd00::10", "fe80::1%eth0", "127.0.0.53", "::ffff:127.0.0.53", "fd00::10"),
				Ndots:       1,
				Timeout:     5,
			},
			hostPorts: []string{"[fd00::10]:53", "[fe80::1%eth0]:53", "127.0.0.53:53", "[::ffff:127.0.0.53]:53", "[fd00::10]:53"},
			addrs:     addrs("fd00::10", "fe80::1", "127.0.0.53"),
		},
		{
			name: "comments, trailing dots and case",
			in:   "# generated\n; also a comment\nnameserver 1.1.1.1 # inline\nsearch Corp.Example. example.com\noptions rotate ndots:2 timeout:1\n",
			want: resolvconf.Config{
				Nameservers: addrs("1.1.1.1"),
				Search:      []string{"corp.example", "example.com"},
				Ndots:       2,
				Timeout:     1,
			},
			hostPorts: []string{"1.1.1.1:53"},
			addrs:     addrs("1.1.1.1"),
		},
		{
			name:      "last search line wins, domain counts as search",
			in:        "search a.example b.example\ndomain c.example\n",
			want:      resolvconf.Config{Search: []string{"c.example"}, Ndots: 1, Timeout: 5},
			hostPorts: []string{},
		},
		{
			name:      "search domains that cannot be names are skipped",
			in:        "search 00.. a..b .lead ok.example. " + strings.Repeat("x", 64) + ".example " + strings.Repeat("a.", 128) + "\n",
			want:      resolvconf.Config{Search: []string{"ok.example"}, Ndots: 1, Timeout: 5},
			hostPorts: []string{},
		},
		{
			name:      "ndots capped at 15",
			in:        "options ndots:40\n",
			want:      resolvconf.Config{Ndots: 15, Timeout: 5},
			hostPorts: []string{},
		},
		{
			name:      "timeout 0 is 1",
			in:        "options timeout:0 attempts:3\n",
			want:      resolvconf.Config{Ndots: 1, Timeout: 1},
			hostPorts: []string{},
		},
		{
			name:      "timeout capped at 30",
			in:        "options timeout:60\n",
			want:      resolvconf.Config{Ndots: 1, Timeout: 30},
			hostPorts: []string{},
		},
		{
			name:      "unknown keywords ignored",
			in:        "sortlist 130.155.160.0/255.255.240.0\nlookup file bind\n",
			want:      resolvconf.Config{Ndots: 1, Timeout: 5},
			hostPorts: []string{},
		},
		{
			name:    "hostname as nameserver",
			in:      "nameserver dns.example.com\n",
			wantErr: `line 1: nameserver "dns.example.com" is not an IP address`,
		},
		{
			name:    "nameserver without value",
			in:      "\nnameserver\n",
			wantErr: "line 2: nameserver without address",
		},
		{
			name:    "bad timeout",
			in:      "options timeout:soon\n",
			wantErr: `bad option "timeout:soon"`,
		},
		{
			name:    "bad ndots",
			in:      "options ndots:-1\n",
			wantErr: `bad option "ndots:-1"`,
		},
		{
			name:    "too large",
			in:      strings.Repeat("#", resolvconf.MaxSize+1),
			wantErr: "larger than",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := resolvconf.Read(strings.NewReader(tt.in))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
			if diff := cmp.Diff(tt.hostPorts, got.HostPorts()); diff != "" {
				t.Errorf("HostPorts (-want +got)\n%s", diff)
			}
			if diff := cmp.Diff(tt.addrs, got.Addrs(), cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
				t.Errorf("Addrs (-want +got)\n%s", diff)
			}
		})
	}
}

func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "resolv.conf")
	if err := os.WriteFile(p, []byte("nameserver 10.0.0.1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := resolvconf.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"10.0.0.1:53"}, got.HostPorts()); diff != "" {
		t.Errorf("(-want +got)\n%s", diff)
	}
	if _, err := resolvconf.ReadFile(filepath.Join(dir, "nope")); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("missing file: err = %v, want the path named", err)
	}
	bad := filepath.Join(dir, "bad")
	if err := os.WriteFile(bad, []byte("nameserver x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := resolvconf.ReadFile(bad); err == nil || !strings.Contains(err.Error(), bad+": resolv.conf line 1") {
		t.Errorf("bad file: err = %v, want path and line", err)
	}
}

func FuzzParse(f *testing.F) {
	// A pod's file, IPv6 with scope, a line longer than the scanner's
	// initial buffer, options with odd values, an error path.
	f.Add([]byte("search ns.svc.cluster.local svc.cluster.local\nnameserver 10.96.0.10\noptions ndots:5\n"))
	f.Add([]byte("nameserver fe80::1%eth0\nnameserver ::1\n"))
	f.Add([]byte("search " + strings.Repeat("a.", 800) + "\n"))
	f.Add([]byte("options ndots:99999999999999999999 ndots:\n"))
	f.Add([]byte("nameserver\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		rc, err := resolvconf.Parse(data)
		if err != nil {
			return
		}
		if rc.Ndots < 0 || rc.Ndots > 15 {
			t.Fatalf("ndots %d out of range", rc.Ndots)
		}
		for _, hp := range rc.HostPorts() {
			if !strings.HasSuffix(hp, ":53") {
				t.Fatalf("nameserver %q without port 53", hp)
			}
		}
		for _, a := range rc.Addrs() {
			if !a.IsValid() || a.Zone() != "" || a.Is4In6() {
				t.Fatalf("capture address %v not normalised", a)
			}
		}
		for _, s := range rc.Search {
			if s == "" || strings.HasSuffix(s, ".") {
				t.Fatalf("search domain %q not normalised", s)
			}
		}
	})
}
