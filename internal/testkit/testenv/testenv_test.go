package testenv

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReplaceFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "entries.yaml")
	ReplaceFile(t, p, "one")
	ReplaceFile(t, p, "two")
	b, err := os.ReadFile(p)
	if err != nil || string(b) != "two" {
		t.Fatalf("read = %q, %v; want two", b, err)
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644 (readable by a helper running as another uid)", fi.Mode().Perm())
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("dir holds %d files, want only the replaced one", len(ents))
	}
}

func TestFreeAddr(t *testing.T) {
	addr := FreeAddr(t)
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("tcp %s: %v", addr, err)
	}
	defer l.Close()
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		t.Fatalf("udp %s: %v", addr, err)
	}
	pc.Close()
	if !strings.HasPrefix(addr, "127.0.0.1:") {
		t.Errorf("addr %s, want 127.0.0.1", addr)
	}
}
