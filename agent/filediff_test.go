package agent

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	meshmetrics "github.com/meshdns/meshdns/internal/metrics"
	"github.com/meshdns/meshdns/pkg/nametable"
)

// A new table file that changes a few names patches the table served (the
// patched table shares its storage: removed names show as garbage); one
// that changes most is applied in stages (stage.go); a file rewritten in
// place over the content last applied, or a change of a table whose
// storage is mostly garbage, is built whole. Either way the table answers
// the new content.
func TestFileReplacementPatches(t *testing.T) {
	m, err := newMetrics(meshmetrics.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ts := &tables{pod: nametable.Context{Namespace: "demo"}, m: m, now: time.Now, publish: func(*nametable.Table) {}}
	dir := t.TempDir()
	path := filepath.Join(dir, "table.json")
	fs := &fileSource{path: path, apply: ts.applyFile, log: quietLogger(t)}
	t.Cleanup(func() {
		if fs.applied != nil {
			fs.applied.Close()
		}
	})
	content := func(n, changed int) []byte {
		var b strings.Builder
		b.WriteString(`{"authoritative_zones": ["example.org"], "table": {`)
		for i := range n {
			if i > 0 {
				b.WriteString(",")
			}
			last := i
			if i < changed {
				last += 100
			}
			fmt.Fprintf(&b, "\n%q: {\"ips\": [\"10.0.%d.%d\"]}", fmt.Sprintf("n%d.example.org", i), last/250, last%250)
		}
		b.WriteString("}}\n")
		return []byte(b.String())
	}
	replace := func(b []byte) { // as an editor or a ConfigMap does: a rename
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	address := func(name string) string {
		res := ts.current().Table.Lookup(dns.Question{Name: name, Qtype: dns.TypeA, Qclass: dns.ClassINET})
		if len(res.Answer) != 1 {
			return fmt.Sprintf("%d answers", len(res.Answer))
		}
		return res.Answer[0].(*dns.A).A.String()
	}
	steps := []struct {
		name    string
		write   func()
		patched bool
		want    string // address of n0.example.org
	}{
		{name: "first", write: func() { replace(content(40, 0)) }, want: "10.0.0.0"},
		{name: "two names change: patched", write: func() { replace(content(40, 2)) }, patched: true, want: "10.0.0.100"},
		{name: "names go: patched", write: func() { replace(content(38, 2)) }, patched: true, want: "10.0.0.100"},
		{name: "most change: staged", write: func() { replace(content(38, 30)) }, patched: true, want: "10.0.0.100"},
		// The stages of so small a table leave it mostly garbage.
		{name: "back: built whole", write: func() { replace(content(38, 0)) }, want: "10.0.0.0"},
		{name: "rewritten in place: built whole", write: func() {
			if err := os.WriteFile(path, content(38, 1), 0o600); err != nil {
				t.Fatal(err)
			}
		}, want: "10.0.0.100"},
	}
	for _, st := range steps {
		st.write()
		if err := fs.load(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if got := address("n0.example.org."); got != st.want {
			t.Errorf("%s: n0 = %s, want %s", st.name, got, st.want)
		}
		if patched := ts.current().Table.Garbage() > 0; patched != st.patched {
			t.Errorf("%s: patched = %v, want %v", st.name, patched, st.patched)
		}
	}
	if got := address("n39.example.org."); got != "0 answers" {
		t.Errorf("removed n39 = %s, want no answer", got)
	}
	if n := ts.current().Names; n != 38 {
		t.Errorf("%d names served, want 38", n)
	}
}

// A new file that changes more than hashdiff.MaxPatchShare of the names is staged,
// and the staged walks then hand over every name of both files, the
// unchanged ones too (the stages replace every entry); one that changes
// a few is a patch of those alone.
func TestFileChangeStagedWalksEveryName(t *testing.T) {
	// n00..n(changed-1) get 10.0.1.x for 10.0.0.x: a new address.
	content := func(changed int) []byte {
		var b strings.Builder
		b.WriteString(`{"authoritative_zones": ["example.org"], "table": {`)
		for i := range 12 {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, "\n\"n%02d.example.org\": {\"ips\": [\"10.0.%d.%d\"]}", i, min(1, max(0, changed-i)), i)
		}
		b.WriteString("}}\n")
		return []byte(b.String())
	}
	sum := func(b []byte) [sha256.Size]byte { return sha256.Sum256(b) }
	var names []string
	for i := range 12 {
		names = append(names, fmt.Sprintf("n%02d.example.org", i))
	}
	old := content(0)
	for _, tc := range []struct {
		changed int
		staged  bool
	}{{changed: 2}, {changed: 6, staged: true}} {
		next := content(tc.changed)
		d, ok, err := fileChange(bytes.NewReader(old), bytes.NewReader(next), sum(old), sum(next), 12, Limits{})
		if err != nil || !ok {
			t.Fatalf("%d changed: ok %v, err %v", tc.changed, ok, err)
		}
		if (d.staged != nil) != tc.staged || d.names != 12 {
			t.Fatalf("%d changed: staged %v, names %d; want staged %v, 12", tc.changed, d.staged != nil, d.names, tc.staged)
		}
		if !tc.staged {
			if len(d.remove) != tc.changed || len(d.add) != tc.changed {
				t.Errorf("%d changed: a patch removing %d and adding %d", tc.changed, len(d.remove), len(d.add))
			}
			continue
		}
		for _, w := range []func(func(string, []byte) error) error{d.staged.old, d.staged.next} {
			var got []string
			if err := w(func(host string, _ []byte) error { got = append(got, strings.Clone(host)); return nil }); err != nil {
				t.Fatal(err)
			}
			slices.Sort(got)
			if !slices.Equal(got, names) {
				t.Errorf("%d changed: a staged walk hands over %v, want every name", tc.changed, got)
			}
		}
	}
}
