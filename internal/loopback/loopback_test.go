package loopback

import (
	"strings"
	"testing"
)

func TestCheckAddr(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:15020", "127.0.0.2:0", "[::1]:15020", "localhost:15020", "LocalHost:1"} {
		if err := CheckAddr(addr); err != nil {
			t.Errorf("CheckAddr(%q) = %v, want nil", addr, err)
		}
	}
	for _, addr := range []string{"0.0.0.0:15020", ":15020", "[::]:15020", "10.0.0.5:15020", "[fd00::1]:1", "example.com:80", "[::ffff:10.0.0.1]:1"} {
		if err := CheckAddr(addr); err == nil || !strings.Contains(err.Error(), "not a loopback address") {
			t.Errorf("CheckAddr(%q) = %v, want a loopback error", addr, err)
		}
	}
	if err := CheckAddr("127.0.0.1"); err == nil || strings.Contains(err.Error(), "loopback") {
		t.Errorf("CheckAddr without a port = %v, want a parse error", err)
	}
}
