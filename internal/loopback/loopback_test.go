package loopback

import (
	"strings"
	"testing"
)

func TestCheckAddr(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:15020", "127.0.0.2:0", "[::1]:15020", "localhost:15020", "LocalHost:1", "localhost.:1"} {
		if err := CheckAddr(addr); err != nil {
			t.Errorf("CheckAddr(%q) = %v, want nil", addr, err)
		}
	}
	for _, addr := range []string{"0.0.0.0:15020", ":15020", "[::]:15020", "10.0.0.5:15020", "[fd00::1]:1", "example.com:80", "[::ffff:10.0.0.1]:1", "a.localhost:1"} {
		if err := CheckAddr(addr); err == nil || !strings.Contains(err.Error(), "not a loopback address") {
			t.Errorf("CheckAddr(%q) = %v, want a loopback error", addr, err)
		}
	}
	if err := CheckAddr("127.0.0.1"); err == nil || strings.Contains(err.Error(), "loopback") {
		t.Errorf("CheckAddr without a port = %v, want a parse error", err)
	}
}

// "localhost" becomes 127.0.0.1 by name, so what /etc/hosts says about it
// (192.0.2.2 in the review that found it) never decides where the admin
// port listens; loopback literals are kept as written.
func TestListenAddr(t *testing.T) {
	for _, tc := range []struct{ name, addr, want string }{
		{name: "localhost", addr: "localhost:15020", want: "127.0.0.1:15020"},
		{name: "any case, root dot", addr: "LOCALHOST.:0", want: "127.0.0.1:0"},
		{name: "IPv4 literal kept", addr: "127.0.0.2:15020", want: "127.0.0.2:15020"},
		{name: "IPv6 literal kept", addr: "[::1]:15020", want: "[::1]:15020"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ListenAddr(tc.addr)
			if err != nil || got != tc.want {
				t.Errorf("ListenAddr(%q) = %q, %v; want %q", tc.addr, got, err, tc.want)
			}
		})
	}
	if got, err := ListenAddr("0.0.0.0:1"); err == nil {
		t.Errorf("ListenAddr(0.0.0.0:1) = %q, want an error", got)
	}
}

func TestHost(t *testing.T) {
	for _, tc := range []struct {
		host string
		want bool
	}{
		{host: "127.0.0.1:15020", want: true},
		{host: "127.0.0.1", want: true},
		{host: "127.9.9.9:1", want: true},
		{host: "localhost", want: true},
		{host: "LocalHost:15020", want: true},
		{host: "localhost.:15020", want: true},
		{host: "[::1]:15020", want: true},
		{host: "[::1]", want: true},
		{host: "[::ffff:127.0.0.1]:1", want: true},
		{host: "", want: false},
		{host: "evil.example", want: false},
		{host: "evil.example:15020", want: false},
		{host: "localhost.evil.example", want: false},
		{host: "a.localhost", want: false},
		{host: "10.0.0.5:15020", want: false},
		{host: "0.0.0.0:15020", want: false},
		{host: "[::]:1", want: false},
		{host: "[fe80::1%lo]:1", want: false},
		{host: "[::1%lo]:1", want: false},
		{host: "127.1:15020", want: false},
		{host: "2130706433", want: false},
		{host: "meshdns-controlplane-0:15014", want: false},
	} {
		if got := Host(tc.host); got != tc.want {
			t.Errorf("Host(%q) = %v, want %v", tc.host, got, tc.want)
		}
	}
}
