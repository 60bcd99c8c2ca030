package dnsname

import (
	"strings"
	"testing"

	"github.com/miekg/dns"
)

func TestCheck(t *testing.T) {
	long := strings.Repeat("a", 63)
	tests := []struct {
		name     string
		wildcard bool
		ok       bool
	}{
		{"web.demo.svc.cluster.local", false, true},
		{"Web.Demo.", false, true},
		{"_http._tcp.web", false, true},
		{"a-b.c", false, true},
		{long + ".com", false, true},
		{"*.example.com", true, true},
		{"", false, false},
		{".", false, false},
		{"a..b", false, false},
		{"-a.b", false, false},
		{"a-.b", false, false},
		{long + "a.com", false, false},
		{strings.Repeat("a.", 127) + "ab", false, false},
		{"a b.c", false, false},
		{"a\\.b", false, false},
		{"*.example.com", false, false},
		{"*", true, false},
		{"a.*.com", true, false},
		{"ü.de", false, false},
	}
	for _, tc := range tests {
		err := Check(tc.name, tc.wildcard)
		if (err == nil) != tc.ok {
			t.Errorf("Check(%q, %v) = %v, want ok %v", tc.name, tc.wildcard, err, tc.ok)
		}
		if err := check(tc.name, tc.wildcard); (err == nil) != tc.ok {
			t.Errorf("check(%q, %v) = %v, want ok %v", tc.name, tc.wildcard, err, tc.ok)
		}
		// The one-pass check takes every accepted name but wildcards.
		if plain(tc.name) != (tc.ok && !strings.HasPrefix(tc.name, "*")) {
			t.Errorf("plain(%q) = %v", tc.name, plain(tc.name))
		}
	}
}

// FuzzCheck: an accepted name is a valid DNS name to miekg, of the same
// labels, and the one-pass check accepts only what the label by label
// one does.
func FuzzCheck(f *testing.F) {
	for _, s := range []string{"web.demo", "*.a.b", "a-b_c.d.", "-x", "a..b"} {
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, name string, wildcard bool) {
		if plain(name) && check(name, wildcard) != nil {
			t.Fatalf("the one-pass check accepted %q, which the label by label one refuses: %v", name, check(name, wildcard))
		}
		if Check(name, wildcard) != nil {
			return
		}
		if _, ok := dns.IsDomainName(name); !ok {
			t.Fatalf("accepted %q, which miekg refuses", name)
		}
		if strings.ContainsAny(name, " \\\x00") {
			t.Fatalf("accepted %q", name)
		}
	})
}
