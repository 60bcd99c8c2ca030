package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestIPTablesCommandErrors(t *testing.T) {
	rc := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(rc, []byte("nameserver 10.96.0.10\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(t.TempDir(), "empty.conf")
	if err := os.WriteFile(empty, []byte("search cluster.local\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{name: "no action", args: nil, wantErr: "no action given"},
		{name: "unknown action", args: []string{"install"}, wantErr: `unknown action "install"`},
		{name: "no owner", args: []string{"apply", "--resolv-conf", rc}, wantErr: "need the agent's uid or gid"},
		{name: "bad uid", args: []string{"apply", "--proxy-uid", "proxy", "--resolv-conf", rc}, wantErr: "not a numeric id"},
		{name: "bad backend", args: []string{"apply", "--proxy-uid", "1337", "--backend", "ebpf", "--resolv-conf", rc}, wantErr: "unknown iptables backend"},
		{name: "no nameservers", args: []string{"apply", "--proxy-uid", "1337", "--resolv-conf", empty}, wantErr: "no nameservers to capture"},
		{name: "missing resolv.conf", args: []string{"print", "--proxy-uid", "1337", "--resolv-conf", rc + ".missing"}, wantErr: "no such file"},
		{name: "port out of range", args: []string{"print", "--proxy-uid", "1337", "--proxy-port", "70000", "--resolv-conf", rc}, wantErr: "out of range"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			err := runIPTables(context.Background(), tc.args, &out, &errOut)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("runIPTables(%q) = %v, want error containing %q", tc.args, err, tc.wantErr)
			}
		})
	}
}
