package agent

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseResolvConf(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    ResolvConf
		wantErr string
	}{
		{
			name: "kubernetes pod",
			in: "search demo.svc.cluster.local svc.cluster.local cluster.local\n" +
				"nameserver 10.96.0.10\noptions ndots:5\n",
			want: ResolvConf{
				Nameservers: []string{"10.96.0.10:53"},
				Search:      []string{"demo.svc.cluster.local", "svc.cluster.local", "cluster.local"},
				Ndots:       5,
			},
		},
		{
			name: "ipv6 and scoped nameservers",
			in:   "nameserver fd00::10\nnameserver fe80::1%eth0\nnameserver 127.0.0.53\n",
			want: ResolvConf{
				Nameservers: []string{"[fd00::10]:53", "[fe80::1%eth0]:53", "127.0.0.53:53"},
				Ndots:       1,
			},
		},
		{
			name: "comments, trailing dots and case",
			in:   "# generated\n; also a comment\nnameserver 1.1.1.1 # inline\nsearch Corp.Example. example.com\noptions rotate ndots:2 timeout:1\n",
			want: ResolvConf{
				Nameservers: []string{"1.1.1.1:53"},
				Search:      []string{"corp.example", "example.com"},
				Ndots:       2,
			},
		},
		{
			name: "last search line wins, domain counts as search",
			in:   "search a.example b.example\ndomain c.example\n",
			want: ResolvConf{Search: []string{"c.example"}, Ndots: 1},
		},
		{
			name: "ndots capped at 15",
			in:   "options ndots:40\n",
			want: ResolvConf{Ndots: 15},
		},
		{
			name: "unknown keywords ignored",
			in:   "sortlist 130.155.160.0/255.255.240.0\nlookup file bind\n",
			want: ResolvConf{Ndots: 1},
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
			name:    "bad ndots",
			in:      "options ndots:-1\n",
			wantErr: `bad option "ndots:-1"`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseResolvConf([]byte(tt.in))
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

func TestParseResolvConfTooLarge(t *testing.T) {
	_, err := ParseResolvConf([]byte(strings.Repeat("#", maxResolvConf+1)))
	if err == nil {
		t.Fatal("want an error for an oversized file")
	}
}

func FuzzParseResolvConf(f *testing.F) {
	// A pod's file, IPv6 with scope, a line longer than the scanner's
	// initial buffer, and options with odd values.
	f.Add([]byte("search ns.svc.cluster.local svc.cluster.local\nnameserver 10.96.0.10\noptions ndots:5\n"))
	f.Add([]byte("nameserver fe80::1%eth0\nnameserver ::1\n"))
	f.Add([]byte("search " + strings.Repeat("a.", 800) + "\n"))
	f.Add([]byte("options ndots:99999999999999999999 ndots:\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		rc, err := ParseResolvConf(data)
		if err != nil {
			return
		}
		if rc.Ndots < 0 || rc.Ndots > 15 {
			t.Fatalf("ndots %d out of range", rc.Ndots)
		}
		for _, ns := range rc.Nameservers {
			if !strings.HasSuffix(ns, ":53") {
				t.Fatalf("nameserver %q without port 53", ns)
			}
		}
		for _, s := range rc.Search {
			if s == "" || strings.HasSuffix(s, ".") {
				t.Fatalf("search domain %q not normalised", s)
			}
		}
	})
}
