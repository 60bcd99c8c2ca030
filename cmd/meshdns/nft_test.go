package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestIPTablesPrintNative: print with the native backend shows the
// nftables tables, with no privilege and no tool needed.
func TestIPTablesPrintNative(t *testing.T) {
	rc := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(rc, []byte("nameserver 10.96.0.10\nnameserver fd00::a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	args := []string{"print", "--backend", "native", "--proxy-uid", "1337", "--proxy-port", "15099", "--resolv-conf", rc}
	if err := runIPTables(context.Background(), args, &out, &errOut); err != nil {
		t.Fatalf("runIPTables(%q) = %v: %s", args, err, errOut.String())
	}
	for _, want := range []string{
		"table ip meshdns {", "table ip6 meshdns {",
		"ip daddr 10.96.0.10 meta l4proto udp udp dport 53 redirect to :15099",
		"ip6 daddr fd00::a meta l4proto tcp tcp dport 53 redirect to :15099",
		"meta skuid 1337 accept",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("print lacks %q:\n%s", want, out.String())
		}
	}
}
