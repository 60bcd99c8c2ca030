package namewire_test

import (
	"bytes"
	"fmt"
	"testing"
	"testing/iotest"

	"github.com/google/go-cmp/cmp"

	"github.com/meshdns/meshdns/internal/namewire"
)

// compareTableForms checks the table file's three readers against one
// another on in (compareJSONTable checks WalkJSONTable against protojson):
// WalkJSONTableWire fails exactly when WalkJSONTable does, read whole or
// one byte at a time, and yields each name marshalled as WalkJSONTable
// decodes it; on a table they accept, SkimJSONTable finds the same zones
// and names.
func compareTableForms(t *testing.T, in []byte) { compareTableFormsBy(t, in, true) }

// compareTableFormsBy is compareTableForms, reading one byte at a time too
// only with oneByte: a name's object is read again after every short
// read, which for a large one takes long.
func compareTableFormsBy(t *testing.T, in []byte, oneByte bool) {
	type walked struct {
		Names []string
		Zones []string
	}
	var want walked
	info := new(namewire.NameInfo)
	werr := namewire.WalkJSONTable(bytes.NewReader(in), info, func(host string, info *namewire.NameInfo) error {
		want.Names = append(want.Names, fmt.Sprintf("%s=%x", host, info.Append(nil)))
		return nil
	}, func(z []string) error {
		want.Zones = z
		return nil
	})
	passes := []bool{false}
	if oneByte {
		passes = append(passes, true)
	}
	for _, oneByte := range passes {
		var got walked
		r := iotest.OneByteReader(bytes.NewReader(in))
		if !oneByte {
			r = bytes.NewReader(in)
		}
		err := namewire.WalkJSONTableWire(r, func(host, info []byte) error {
			got.Names = append(got.Names, fmt.Sprintf("%s=%x", host, info))
			return nil
		}, func(z []string) error {
			got.Zones = z
			return nil
		})
		if (werr == nil) != (err == nil) {
			t.Fatalf("%q (one byte at a time %v): WalkJSONTable error %v, WalkJSONTableWire error %v", in, oneByte, werr, err)
		}
		if diff := cmp.Diff(want, got); err == nil && diff != "" {
			t.Fatalf("%q (one byte at a time %v): (-WalkJSONTable +WalkJSONTableWire):\n%s", in, oneByte, diff)
		}
	}
	if werr != nil {
		return // the skim checks nothing: the walk that follows it fails
	}
	zones, names, err := namewire.SkimJSONTable(iotest.HalfReader(bytes.NewReader(in)))
	if err != nil || names != len(want.Names) || !cmp.Equal(zones, want.Zones) {
		t.Fatalf("%q: skim found zones %q and %d names (error %v), want %q and %d", in, zones, names, err, want.Zones, len(want.Names))
	}
}

func TestJSONTableForms(t *testing.T) {
	for i, c := range jsonTableCases {
		t.Run(fmt.Sprint(i), func(t *testing.T) { compareTableForms(t, []byte(c)) })
	}
	// Endpoints of several sizes one after another: the wire walk reuses
	// their lists.
	t.Run("cluster", func(t *testing.T) { compareTableForms(t, clusterTable(300)) })
	t.Run("ports", func(t *testing.T) { compareTableForms(t, []byte(repeatedPorts)) })
	// A name larger than the window's first size: read again as the
	// window grows, its ports remembered meanwhile.
	t.Run("large", func(t *testing.T) {
		b := []byte(`{"table": {"a": {"ports": [`)
		for i := range 2000 {
			if i > 0 {
				b = append(b, ", "...)
			}
			b = fmt.Appendf(b, `{"name": "http", "port": %d, "protocol": "TCP"}`, 80+i%3)
		}
		b = append(b, `]}, "b": {"ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}}}`...)
		compareTableFormsBy(t, b, false)
	})
}

// repeatedPorts repeats port objects from name to name, the same bytes
// or nearly (the wire walk remembers them).
const repeatedPorts = `{"table": {
"a": {"ports": [{"name": "http", "port": 80, "protocol": "TCP"}, {"name": "h\u0074tp", "port": "8"}, {}]},
"b": {"ports": [{"name": "http", "port": 80, "protocol": "TCP"}, {"name": "h\u0074tp", "port": "8"}, {"port": null}]},
"c": {"ports": [{"name": "http", "port": 80, "protocol": "TCP"}, {"name": "http", "port": 80, "protocol": "TCP"}]},
"d": {"ports": [{"name": "http", "port": 80, "protocol": "UDP"}, {"name": "http", "port": 80, "protocol": "TCP" }]},
"e": {"ports": [{"name": "http", "port": 80, "protocol": "UDP"},{"name":"http","port":80,"protocol":"TCP"}, {"port": 1}, {"port": 1}, {"port": 1}]},
"f": {"ports": [{"protocol": "UDP", "name": "http", "port": 80}, {"name": "", "port": 0, "protocol": ""}, {"port": 10}, {"port": 1}, {"port": 1}]},
"g": {"ports": [{"protocol": "UDP", "name": "http", "port": 80}, {"name": "", "port": 0, "protocol": ""}, {"port": 1e1}, {"port": 1}, {"port": 2}]}
}}`

func FuzzJSONTableForms(f *testing.F) {
	for _, c := range jsonTableCases {
		f.Add([]byte(c))
	}
	f.Add(clusterTable(12))
	f.Add([]byte(repeatedPorts))
	f.Add([]byte(`{"table": {"a": {"endpoints": [{"ips": ["1", "2"], "forZones": ["z"]}]}, "b": {"endpoints": [{}, {"ips": null}]}}}`))
	f.Fuzz(compareTableForms)
}
