package agent

import (
	"bytes"
	"crypto/sha256"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meshdns/meshdns/pkg/nametable"
)

// The first pass over a table file hashes all of it and finds the zones
// wherever they are, whatever the values around them hold.
func TestScanTableFile(t *testing.T) {
	tests := []struct {
		name    string
		content string
		zones   []string
		wantErr bool
	}{
		{name: "zones first", content: `{"authoritative_zones": ["cluster.local"], "table": {"a.example": {"ips": ["10.0.0.1"]}}}`, zones: []string{"cluster.local"}},
		{name: "zones last, camel case", content: `{"table": {"a\"}.example": {"ips": ["10.0.0.1"], "ttl": 5, "x": [true, null, {"y": "]"}]}}, "authoritativeZones": ["a", "b"]}`, zones: []string{"a", "b"}},
		{name: "escaped key", content: `{"table": {}, "authoritative\u005fzones": ["c"]}`, zones: []string{"c"}},
		{name: "no zones", content: `{"table": {}}` + "\n", zones: nil},
		{name: "empty object", content: ` { } `, zones: nil},
		{name: "not an object", content: `[1]`, wantErr: true},
		{name: "cut", content: `{"table": {"a": `, wantErr: true},
		{name: "zones not strings", content: `{"authoritative_zones": [1]}`, wantErr: true},
		{name: "missing comma", content: `{"table": {} "x": 1}`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			head, err := scanTableFile(strings.NewReader(tt.content))
			if (err != nil) != tt.wantErr {
				t.Fatalf("scan error %v, want error %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if diff := cmp.Diff(tt.zones, head.zones); diff != "" {
				t.Errorf("zones (-want +got):\n%s", diff)
			}
			if head.sum != sha256.Sum256([]byte(tt.content)) {
				t.Error("the hash is not the content's")
			}
		})
	}
}

// A file whose content is not the one the first pass read (rewritten in
// place between the passes) is rejected rather than built half old, half
// new.
func TestBuildTableFileFromChangedContent(t *testing.T) {
	first := []byte(`{"authoritative_zones": ["cluster.local"], "table": {"a.example": {"ips": ["10.0.0.1"]}}}`)
	second := bytes.Replace(first, []byte("10.0.0.1"), []byte("10.0.0.2"), 1)
	head, err := scanTableFile(bytes.NewReader(first))
	if err != nil {
		t.Fatal(err)
	}
	pod := nametable.Context{Namespace: "demo"}
	if _, _, err := buildTableFileFrom(bytes.NewReader(first), head, Limits{}, pod); err != nil {
		t.Fatalf("the same content: %v", err)
	}
	if _, _, err := buildTableFileFrom(bytes.NewReader(second), head, Limits{}, pod); err == nil || !strings.Contains(err.Error(), "changed") {
		t.Fatalf("changed content: error %v, want the file changed", err)
	}
}
