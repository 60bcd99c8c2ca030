package filesource

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"

	"github.com/meshdns/meshdns/controlplane/registry"
	"github.com/meshdns/meshdns/pkg/nametable"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

var addrCmp = cmp.Comparer(func(a, b netip.Addr) bool { return a == b })

func TestParse(t *testing.T) {
	tests := []struct {
		name      string
		yaml      string
		want      []registry.Entry
		wantZones []string
		wantErr   string
	}{
		{
			name: "the documented example entry",
			yaml: `
entries:
  - hostname: api.example.internal
    addresses: ["10.1.2.3", "fd00::3"]
    ports: [{name: https, port: 443, protocol: TCP}]
    namespaces: ["team-a"]
`,
			want: []registry.Entry{{
				Entry: nametable.Entry{Hostname: "api.example.internal", Registry: "File",
					IPs:   []netip.Addr{netip.MustParseAddr("10.1.2.3"), netip.MustParseAddr("fd00::3")},
					Ports: []nametable.Port{{Name: "https", Port: 443, Protocol: "TCP"}}},
				Namespaces: []string{"team-a"},
			}},
		},
		{
			name: "wildcard, no addresses, defaults, zones, aliases",
			yaml: `
zones: [Corp.Example.]
entries:
  - hostname: "*.Corp.Example."
    ports: [{name: dns, port: 53, protocol: udp}, {name: web, port: 80}]
    aliases: [alias.corp.example]
    ttl: 60
`,
			want: []registry.Entry{{Entry: nametable.Entry{Hostname: "*.corp.example", Registry: "File", TTL: 60,
				AltHosts: []string{"alias.corp.example"},
				Ports:    []nametable.Port{{Name: "dns", Port: 53, Protocol: "UDP"}, {Name: "web", Port: 80, Protocol: "TCP"}}}}},
			wantZones: []string{"corp.example"},
		},
		{name: "explicitly empty", yaml: "entries: []"},
		{name: "explicitly empty with zones", yaml: "zones: [corp.example]\nentries: []\n", wantZones: []string{"corp.example"}},
		{name: "empty file", yaml: ``, wantErr: "file is empty"},
		{name: "whitespace only", yaml: " \n\t\n\n", wantErr: "file is empty"},
		{name: "comments only", yaml: "# entries moved to team-b.yaml\n", wantErr: "file is empty"},
		{name: "JSON null", yaml: "null", wantErr: "file is empty"},
		{name: "no entries key", yaml: "zones: [corp.example]", wantErr: "no entries list"},
		{name: "entries without a value", yaml: "entries:\n", wantErr: "no entries list"},
		{name: "a list, not a mapping", yaml: "- hostname: a.x", wantErr: "not a mapping"},
		{name: "same name for disjoint namespaces", yaml: `
entries:
  - {hostname: db.x, addresses: [10.0.0.1], namespaces: [a]}
  - {hostname: db.x, addresses: [10.0.0.2]}
`, want: []registry.Entry{
			{Entry: nametable.Entry{Hostname: "db.x", Registry: "File", IPs: []netip.Addr{netip.MustParseAddr("10.0.0.1")}}, Namespaces: []string{"a"}},
			{Entry: nametable.Entry{Hostname: "db.x", Registry: "File", IPs: []netip.Addr{netip.MustParseAddr("10.0.0.2")}}},
		}},
		{name: "bad address", yaml: "entries: [{hostname: a.x, addresses: [10.1.2]}]", wantErr: `entries[0] "a.x": address "10.1.2": not an IP address`},
		{name: "misspelt field", yaml: "entries: [{hostname: a.x, adresses: [10.1.2.3]}]", wantErr: `unknown field "adresses"`},
		{name: "port out of range", yaml: "entries: [{hostname: a.x, ports: [{name: p, port: 70000}]}]", wantErr: "out of range"},
		{name: "bad protocol", yaml: "entries: [{hostname: a.x, ports: [{name: p, port: 1, protocol: ICMP}]}]", wantErr: `protocol "ICMP"`},
		{name: "wildcard not first", yaml: "entries: [{hostname: a.*.x}]", wantErr: `"*" allowed only as the first label`},
		{name: "empty hostname", yaml: "entries: [{addresses: [10.0.0.1]}]", wantErr: "hostname: empty"},
		{name: "duplicate", yaml: "entries: [{hostname: a.x}, {hostname: A.x.}]", wantErr: "duplicate of entries[0]"},
		{name: "bad namespace", yaml: "entries: [{hostname: a.x, namespaces: [team/a]}]", wantErr: `namespace "team/a"`},
		{name: "one bad entry rejects the file", yaml: "entries: [{hostname: good.x, addresses: [10.0.0.1]}, {hostname: bad.x, addresses: [nope]}]", wantErr: `entries[1] "bad.x"`},
		{name: "not yaml", yaml: "entries: [", wantErr: "decode"},
		{name: "every fault of one entry", yaml: "entries: [{hostname: -bad.x, addresses: [10.0.0.300, 10.0.0.1, nope], namespaces: [team/a]}]",
			wantErr: "entries[0] \"-bad.x\": hostname: label \"-bad\" starts or ends with '-'\n" +
				"entries[0] \"-bad.x\": address \"10.0.0.300\": not an IP address\n" +
				"entries[0] \"-bad.x\": address \"nope\": not an IP address\n" +
				"entries[0] \"-bad.x\": namespace \"team/a\""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, zones, err := Parse([]byte(tc.yaml))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
				}
				if got != nil {
					t.Errorf("entries = %v alongside an error", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, addrCmp); diff != "" {
				t.Errorf("entries (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantZones, zones); diff != "" {
				t.Errorf("zones (-want +got):\n%s", diff)
			}
		})
	}
}

// FuzzParse checks that any input either fails cleanly or yields entries
// the registry's converter turns into NameInfo that survives the wire.
func FuzzParse(f *testing.F) {
	// Seeds: the documented shape, a wildcard without addresses, v4-mapped
	// v6, and broken inputs near the validation edges.
	f.Add([]byte("entries:\n  - hostname: api.example.internal\n    addresses: [\"10.1.2.3\", \"fd00::3\"]\n    ports: [{name: https, port: 443, protocol: TCP}]\n    namespaces: [team-a]\n"))
	f.Add([]byte("zones: [corp.example]\nentries: [{hostname: '*.corp.example', ttl: 5}]"))
	f.Add([]byte("entries: [{hostname: m.x, addresses: ['::ffff:10.0.0.1']}]"))
	f.Add([]byte("entries: [{hostname: -a.x}]"))
	f.Add([]byte(`{"entries":[{"hostname":"j.x","ports":[{"name":"p","port":65535}]}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		entries, _, err := Parse(data)
		if err != nil {
			return
		}
		for _, e := range entries {
			if e.Hostname != registry.CanonicalHost(e.Hostname) {
				t.Fatalf("hostname %q not canonical", e.Hostname)
			}
			ni := registry.ToNameInfo(e.Entry)
			b, err := proto.Marshal(ni)
			if err != nil {
				t.Fatalf("marshal %q: %v", e.Hostname, err)
			}
			back := &meshdnsv1.NameInfo{}
			if err := proto.Unmarshal(b, back); err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(ni, back) {
				t.Fatalf("round trip changed %v into %v", ni, back)
			}
			if len(back.GetIps()) != len(e.IPs) {
				t.Fatalf("ips %v from %v", back.GetIps(), e.IPs)
			}
			for i, s := range back.GetIps() {
				ip, err := netip.ParseAddr(s)
				if err != nil || ip != e.IPs[i] {
					t.Fatalf("ip %q does not parse back to %v", s, e.IPs[i])
				}
			}
		}
	})
}

// TestExamples keeps examples/entries valid.
func TestExamples(t *testing.T) {
	files, err := filepath.Glob("../../examples/entries/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no example files: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			entries, _, err := Parse(data)
			if err != nil {
				t.Fatal(err)
			}
			if len(entries) == 0 {
				t.Error("no entries")
			}
		})
	}
}
