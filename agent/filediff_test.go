package agent

import (
	"fmt"
	"os"
	"path/filepath"
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
