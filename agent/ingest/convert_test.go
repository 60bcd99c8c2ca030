package ingest

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/meshdns/meshdns/internal/dnsname"
	"github.com/meshdns/meshdns/internal/namewire"
	"github.com/meshdns/meshdns/pkg/nametable"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

func addrs(s ...string) []netip.Addr {
	out := make([]netip.Addr, len(s))
	for i, a := range s {
		out[i] = netip.MustParseAddr(a)
	}
	return out
}

var addrCmp = cmp.Comparer(func(a, b netip.Addr) bool { return a == b })

func TestConvert(t *testing.T) {
	tests := []struct {
		name      string
		in        *namewire.NameTable
		lim       Limits
		want      []nametable.Entry
		wantZones []string
		wantErr   string
	}{
		{
			name: "every kind of name",
			in: &namewire.NameTable{
				AuthoritativeZones: []string{"Cluster.Local."},
				Table: map[string]*namewire.NameInfo{
					"web.demo.svc.cluster.local": {
						IPs: []string{"10.96.0.20", "fd00::20"}, Registry: "Kubernetes",
						Shortname: "web", Namespace: "demo",
						Ports: []namewire.Port{{Name: "http", Port: 80, Protocol: "tcp"}, {Name: "dns", Port: 53}},
					},
					"db.demo.svc.cluster.local": {
						Registry: "Kubernetes", Shortname: "db", Namespace: "demo",
						Endpoints: []namewire.Endpoint{{Hostname: "db-0", IPs: []string{"10.0.0.3"}}, {IPs: []string{"::ffff:10.0.0.4"}}},
					},
					"mail.demo.svc.cluster.local": {Registry: "Kubernetes", CanonicalName: "mail.example.com.", TTL: 60},
					"*.corp.example":              {IPs: []string{"192.0.2.1"}, Registry: "File", AltHosts: []string{"corp.example"}},
				},
			},
			want: []nametable.Entry{
				{Hostname: "*.corp.example", IPs: addrs("192.0.2.1"), Registry: "File", AltHosts: []string{"corp.example"}},
				{
					Hostname: "db.demo.svc.cluster.local", Registry: "Kubernetes", ShortName: "db", Namespace: "demo",
					Endpoints: []nametable.Endpoint{{Hostname: "db-0", IPs: addrs("10.0.0.3")}, {IPs: addrs("10.0.0.4")}},
				},
				{Hostname: "mail.demo.svc.cluster.local", Registry: "Kubernetes", CanonicalName: "mail.example.com", TTL: 60},
				{
					Hostname: "web.demo.svc.cluster.local", IPs: addrs("10.96.0.20", "fd00::20"), Registry: "Kubernetes",
					ShortName: "web", Namespace: "demo",
					Ports: []nametable.Port{{Name: "http", Port: 80, Protocol: "TCP"}, {Name: "dns", Port: 53, Protocol: "TCP"}},
				},
			},
			wantZones: []string{"cluster.local"},
		},
		{name: "nil table", in: nil},
		{
			name:    "bad address",
			in:      &namewire.NameTable{Table: map[string]*namewire.NameInfo{"a.example": {IPs: []string{"10.0.0.256"}}}},
			wantErr: `name "a.example": bad address "10.0.0.256"`,
		},
		{
			name:    "scoped address",
			in:      &namewire.NameTable{Table: map[string]*namewire.NameInfo{"a.example": {IPs: []string{"fe80::1%eth0"}}}},
			wantErr: `bad address "fe80::1%eth0"`,
		},
		{
			name:    "unspecified address",
			in:      &namewire.NameTable{Table: map[string]*namewire.NameInfo{"a.example": {IPs: []string{"0.0.0.0"}}}},
			wantErr: `bad address "0.0.0.0"`,
		},
		{
			name:    "bad name",
			in:      &namewire.NameTable{Table: map[string]*namewire.NameInfo{"a..example": {IPs: []string{"10.0.0.1"}}}},
			wantErr: "empty label",
		},
		{
			name:    "wildcard in the middle",
			in:      &namewire.NameTable{Table: map[string]*namewire.NameInfo{"a.*.example": {IPs: []string{"10.0.0.1"}}}},
			wantErr: `"*" allowed only as the first label`,
		},
		{
			name:    "label too long",
			in:      &namewire.NameTable{Table: map[string]*namewire.NameInfo{strings.Repeat("a", 64) + ".example": {}}},
			wantErr: "longer than 63",
		},
		{
			name: "names differing in case",
			in: &namewire.NameTable{Table: map[string]*namewire.NameInfo{
				"A.example": {IPs: []string{"10.0.0.1"}}, "a.example": {IPs: []string{"10.0.0.2"}},
			}},
			wantErr: "appears twice",
		},
		{
			name:    "wildcard zone",
			in:      &namewire.NameTable{AuthoritativeZones: []string{"*.cluster.local"}},
			wantErr: `zone "*.cluster.local"`,
		},
		{
			name:    "too many names",
			in:      &namewire.NameTable{Table: map[string]*namewire.NameInfo{"a.example": {}, "b.example": {}}},
			lim:     Limits{MaxNames: 1},
			wantErr: "2 names, more than the limit of 1",
		},
		{
			name:    "too many addresses",
			in:      &namewire.NameTable{Table: map[string]*namewire.NameInfo{"a.example": {IPs: []string{"10.0.0.1", "10.0.0.2"}}}},
			lim:     Limits{MaxIPs: 1},
			wantErr: "2 addresses",
		},
		{
			name: "port out of range",
			in: &namewire.NameTable{Table: map[string]*namewire.NameInfo{
				"a.example": {Ports: []namewire.Port{{Name: "http", Port: 70000}}},
			}},
			wantErr: "out of range",
		},
		{
			name: "unknown protocol",
			in: &namewire.NameTable{Table: map[string]*namewire.NameInfo{
				"a.example": {Ports: []namewire.Port{{Name: "http", Port: 80, Protocol: "QUIC"}}},
			}},
			wantErr: "unknown protocol",
		},
		{
			name: "endpoint without address",
			in: &namewire.NameTable{Table: map[string]*namewire.NameInfo{
				"a.example": {Endpoints: []namewire.Endpoint{{Hostname: "x"}}},
			}},
			wantErr: "endpoint 0 has no address",
		},
		{
			name: "canonical name with addresses",
			in: &namewire.NameTable{Table: map[string]*namewire.NameInfo{
				"a.example": {IPs: []string{"10.0.0.1"}, CanonicalName: "b.example"},
			}},
			wantErr: "canonical name together with addresses",
		},
		{
			name:    "nil name info",
			in:      &namewire.NameTable{Table: map[string]*namewire.NameInfo{"a.example": nil}},
			wantErr: "no name info",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, zones, err := convertTable(tt.in, tt.lim)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, ErrInvalidTable) {
					t.Fatalf("err = %v, want ErrInvalidTable with %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got, addrCmp); diff != "" {
				t.Errorf("entries (-want +got)\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantZones, zones); diff != "" && !(len(tt.wantZones) == 0 && len(zones) == 0) {
				t.Errorf("zones (-want +got)\n%s", diff)
			}
		})
	}
}

func FuzzConvert(f *testing.F) {
	seed := func(t *meshdnsv1.NameTable) {
		b, err := proto.Marshal(t)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	// A valid table of each kind, then the shapes the validator must reject:
	// a scoped IP, an over-long name, a wildcard in the middle.
	seed(&meshdnsv1.NameTable{
		AuthoritativeZones: []string{"cluster.local"},
		Table: map[string]*meshdnsv1.NameInfo{
			"web.demo.svc.cluster.local": {Ips: []string{"10.96.0.20"}, Shortname: "web", Namespace: "demo",
				Ports: []*meshdnsv1.Port{{Name: "http", Port: 80, Protocol: "TCP"}}},
			"db.demo.svc.cluster.local": {Endpoints: []*meshdnsv1.Endpoint{{Hostname: "db-0", Ips: []string{"10.0.0.3"}}}},
			"x.demo.svc.cluster.local":  {CanonicalName: "example.com"},
			"*.corp.example":            {Ips: []string{"fd00::1"}},
		},
	})
	seed(&meshdnsv1.NameTable{Table: map[string]*meshdnsv1.NameInfo{"a.example": {Ips: []string{"fe80::1%eth0"}}}})
	seed(&meshdnsv1.NameTable{Table: map[string]*meshdnsv1.NameInfo{strings.Repeat("a.", 130) + "x": {}}})
	seed(&meshdnsv1.NameTable{Table: map[string]*meshdnsv1.NameInfo{"a.*.b": {}}})
	f.Fuzz(func(t *testing.T, data []byte) {
		// namewire's FuzzNameTable holds the decoding to the generated
		// code; what it refuses never reaches a conversion.
		nt, err := decodeTable(data)
		if err != nil {
			return
		}
		entries, zones, err := convertTable(nt, Limits{})
		// Building the table as the client keeps it (marshalled again:
		// one entry per name), name by name, gives the table New gives.
		built, n, berr := build(memVersion("v", nt.Marshal()), Limits{}.withDefaults(), nametable.Context{Namespace: "demo"}, false)
		var want *nametable.Table
		if err == nil {
			want, err = nametable.New(entries, zones, nametable.Context{Namespace: "demo"})
		}
		if (err == nil) != (berr == nil) {
			t.Fatalf("convert+New error %v, build error %v", err, berr)
		}
		if err != nil {
			return
		}
		if n != len(entries) {
			t.Fatalf("build counted %d names, convert %d", n, len(entries))
		}
		if diff := cmp.Diff(want.Names(), built.Names()); diff != "" {
			t.Fatalf("names (-New +build):\n%s", diff)
		}
		if len(entries) != len(nt.Table) {
			t.Fatalf("%d entries from %d names", len(entries), len(nt.Table))
		}
		for _, z := range zones {
			if dnsname.Check(z, false) != nil {
				t.Fatalf("zone %q accepted", z)
			}
		}
		for _, e := range entries {
			if dnsname.Check(e.Hostname, true) != nil {
				t.Fatalf("name %q accepted", e.Hostname)
			}
			for _, a := range e.IPs {
				if !a.IsValid() || a.Zone() != "" {
					t.Fatalf("address %v accepted", a)
				}
			}
		}
	})
}

// FuzzTableFile feeds arbitrary --nametable-file content through the
// parser and the converter, the path a hand-edited file takes.
func FuzzTableFile(f *testing.F) {
	// The demo table, a table with a wrong type, deep nesting, an unknown
	// field, both spellings of the zones, null values, a duplicate name in
	// another case and trailing data.
	if b, err := os.ReadFile("../../examples/nametable.json"); err == nil {
		f.Add(b)
	}
	f.Add([]byte(`{"table": {"a.example": {"ips": "10.0.0.1"}}}`))
	f.Add([]byte(`{"table": {"a.example": {"ports": [{"port": 99999999999}]}}}`))
	f.Add([]byte(`[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[`))
	f.Add([]byte(`{"tabel": {}}`))
	f.Add([]byte(`{"authoritativeZones": ["Cluster.Local."], "table": {"a.example": {"ips": ["10.0.0.1"], "altHosts": ["b.example"]}}}`))
	f.Add([]byte(`{"authoritative_zones": null, "table": null}`))
	f.Add([]byte(`{"table": {"a.example": null}}`))
	f.Add([]byte(`{"table": {"a.example": {}, "A.example": {}}}`))
	f.Add([]byte(`{"table": {}} {}`))
	f.Add([]byte(`{"table": {}, "table": {}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		// A file's version builds the table protojson plus the
		// converter give, or both fail; and it dumps what protojson
		// reads.
		v := newFileVersion(bytes.NewReader(data), int64(len(data)), sha256.Sum256(data))
		pod := nametable.Context{Namespace: "demo"}
		built, n, berr := build(v, Limits{}.withDefaults(), pod, true)
		var pt meshdnsv1.NameTable
		perr := protojson.Unmarshal(data, &pt)
		if perr == nil && pt.GetSettings() != nil {
			perr = errors.New("settings in a table file") // refused by design
		}
		var want *nametable.Table
		var entries []nametable.Entry
		if perr == nil {
			var zones []string
			if entries, zones, perr = convertTable(fromProto(t, &pt), Limits{}); perr == nil {
				want, perr = nametable.New(entries, zones, pod)
			}
		}
		if (perr == nil) != (berr == nil) {
			t.Fatalf("protojson+convert+New error %v, file version build error %v", perr, berr)
		}
		if perr != nil {
			return
		}
		if n != len(entries) {
			t.Fatalf("build counted %d names, the converter %d", n, len(entries))
		}
		if diff := cmp.Diff(want.Names(), built.Names()); diff != "" {
			t.Fatalf("names (-protojson +file version):\n%s", diff)
		}
		nt, err := (&Served[string]{v: v}).Dump()
		if err != nil {
			t.Fatalf("dump of a valid file: %v", err)
		}
		if diff := cmp.Diff(fromProto(t, &pt), nt, cmpopts.EquateEmpty(), cmpopts.IgnoreUnexported(namewire.NameInfo{})); diff != "" {
			t.Fatalf("dump (-protojson +file version):\n%s", diff)
		}
	})
}

// FuzzTableFileConverted is FuzzTableFile's check for a version that
// ReadFileVersion hashed and Convert readied: its zones skimmed ahead, its first walk converting on
// a goroutine of its own, the later walks reading the wire form.
func FuzzTableFileConverted(f *testing.F) {
	f.Add([]byte(`{"authoritativeZones": ["Cluster.Local."], "table": {"a.example": {"ips": ["10.0.0.1"], "altHosts": ["b.example"]}}}`))
	f.Add([]byte(`{"table": {"a.example": {"ips": ["10.0.0.1"]}}, "authoritative_zones": ["example"]}`))
	f.Add([]byte(`{"table": {"a.example": {"ips": ["10.0.0.1"]}}, "authoritativeZones": ["example"], "authoritativeZones": ["other"]}`))
	f.Add([]byte(`{"table": {"a.example": {"ips": [}}, "authoritativeZones": ["example"]}`))
	f.Add([]byte(`{"table": {"a.example": {}, "A.example": {}}}`))
	f.Add([]byte(`{"table": {}} {}`))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		var pt meshdnsv1.NameTable
		perr := protojson.Unmarshal(data, &pt)
		if perr == nil && pt.GetSettings() != nil {
			perr = errors.New("settings in a table file") // refused by design
		}
		pod := nametable.Context{Namespace: "demo"}
		var want *nametable.Table
		if perr == nil {
			entries, zones, err := convertTable(fromProto(t, &pt), Limits{})
			if perr = err; err == nil {
				want, perr = nametable.New(entries, zones, pod)
			}
		}
		v, cerr, err := ReadFileVersion(bytes.NewReader(data), int64(len(data)), dir)
		if err != nil {
			t.Fatalf("ReadFileVersion: %v", err)
		}
		defer v.Close()
		if v.Sum() != sha256.Sum256(data) {
			t.Fatalf("Sum = %x, want the SHA-256 of the content", v.Sum())
		}
		if perr == nil && cerr != nil {
			t.Fatalf("Convert of a valid file: %v", cerr)
		}
		// Twice: the first walk converts, the second reads the wire form
		// (or converts again, after a first that failed).
		for walk := range 2 {
			built, _, berr := build(v, Limits{}.withDefaults(), pod, walk == 0)
			if (perr == nil) != (berr == nil) {
				t.Fatalf("walk %d: protojson+convert+New error %v, converted file version build error %v", walk, perr, berr)
			}
			if perr != nil {
				continue
			}
			if diff := cmp.Diff(want.Names(), built.Names()); diff != "" {
				t.Fatalf("walk %d: names (-protojson +converted file version):\n%s", walk, diff)
			}
		}
		if perr != nil {
			return
		}
		nt, err := (&Served[string]{v: v}).Dump()
		if err != nil {
			t.Fatalf("dump of a valid file: %v", err)
		}
		if diff := cmp.Diff(fromProto(t, &pt), nt, cmpopts.EquateEmpty(), cmpopts.IgnoreUnexported(namewire.NameInfo{})); diff != "" {
			t.Fatalf("dump (-protojson +converted file version):\n%s", diff)
		}
	})
}

// A file shorter than the size it was said to have is an error, and no
// version.
func TestReadFileVersionShort(t *testing.T) {
	data := []byte(`{"table": {"a.example": {"ips": ["10.0.0.1"]}}}`)
	v, _, err := ReadFileVersion(bytes.NewReader(data), int64(len(data))+10, t.TempDir())
	if err == nil || v != nil {
		t.Fatalf("ReadFileVersion of a short file = %v, %v; want an error", v, err)
	}
}
