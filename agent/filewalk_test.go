package agent

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// skimTableNames yields the names and NameInfos eachFileName does (as
// JSON values: the skim keeps the bytes as written), and the same hash.
func TestSkimTableNamesMatchesTheDecoder(t *testing.T) {
	file := `{ "authoritative_zones" : ["example.org"],
	"table":{"a.example.org":{"ips":["10.0.0.1"],"ports":[{"name":"http","port":80}]} ,
	 "b\u002eexample.org" : {"ips": ["10.0.0.2"], "registry": "File \"quoted\" {not a brace}"},
	 "*.w.example.org": {"canonical_name": "x.example.org"}, "c.example.org":{}}
}
`
	type name struct{ Host, Info string }
	compact := func(raw []byte) string {
		var b bytes.Buffer
		if err := json.Compact(&b, raw); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	var want, got []name
	wantSum, err := eachFileName(strings.NewReader(file), func(host string, raw []byte) error {
		want = append(want, name{host, compact(raw)})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sum, err := skimTableNames(strings.NewReader(file), func(host string, raw []byte) error {
		got = append(got, name{strings.Clone(host), compact(raw)})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("names (-decoder +skim):\n%s", diff)
	}
	if sum != wantSum {
		t.Error("the skim's hash differs from the decoder's")
	}
	if other, _ := skimTableNames(strings.NewReader(file+" "), func(string, []byte) error { return nil }); other == sum {
		t.Error("two contents hash the same")
	}
	for _, bad := range []string{`{"table": {"a": }}`, `{"table": ["a"]}`, `{"table": {"a": {}`, `[]`} {
		if _, err := skimTableNames(strings.NewReader(bad), func(string, []byte) error { return nil }); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}
