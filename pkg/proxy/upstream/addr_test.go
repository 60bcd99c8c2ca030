package upstream

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseAddr(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     Addr
		str      string
		wantErr  bool
	}{
		{name: "ip", in: "10.0.0.10", want: Addr{HostPort: "10.0.0.10:53"}, str: "10.0.0.10:53"},
		{name: "ip port", in: "10.0.0.10:5353", want: Addr{HostPort: "10.0.0.10:5353"}, str: "10.0.0.10:5353"},
		{name: "v6", in: "fd00::10", want: Addr{HostPort: "[fd00::10]:53"}, str: "[fd00::10]:53"},
		{name: "v6 port", in: "[fd00::10]:54", want: Addr{HostPort: "[fd00::10]:54"}, str: "[fd00::10]:54"},
		{name: "dns scheme", in: "dns://10.0.0.10", want: Addr{HostPort: "10.0.0.10:53"}, str: "10.0.0.10:53"},
		{name: "tls", in: "tls://9.9.9.9", want: Addr{HostPort: "9.9.9.9:853", TLS: true}, str: "tls://9.9.9.9:853"},
		{name: "tls name", in: "tls://9.9.9.9@dns.quad9.net", want: Addr{HostPort: "9.9.9.9:853", TLS: true, ServerName: "dns.quad9.net"},
			str: "tls://9.9.9.9:853@dns.quad9.net"},
		{name: "tls v6 port name", in: "tls://[2620:fe::fe]:8853@dns.quad9.net.",
			want: Addr{HostPort: "[2620:fe::fe]:8853", TLS: true, ServerName: "dns.quad9.net"}, str: "tls://[2620:fe::fe]:8853@dns.quad9.net"},
		{name: "hostname", in: "dns.example:53", wantErr: true},
		{name: "https", in: "https://9.9.9.9/dns-query", wantErr: true},
		{name: "port zero", in: "10.0.0.1:0", wantErr: true},
		{name: "bad port", in: "10.0.0.1:x", wantErr: true},
		{name: "empty name", in: "tls://9.9.9.9@", wantErr: true},
		{name: "bad name", in: "tls://9.9.9.9@a..b", wantErr: true},
		{name: "empty", in: "", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseAddr(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("ParseAddr(%q) error %v, want error %v", tc.in, err, tc.wantErr)
			}
			if tc.wantErr {
				return
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ParseAddr(%q) (-want +got):\n%s", tc.in, diff)
			}
			if got.String() != tc.str {
				t.Errorf("String() = %q, want %q", got.String(), tc.str)
			}
		})
	}
}
