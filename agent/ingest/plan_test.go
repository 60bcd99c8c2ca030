package ingest

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/miekg/dns"

	meshmetrics "github.com/meshdns/meshdns/internal/metrics"
	"github.com/meshdns/meshdns/internal/namewire"
	"github.com/meshdns/meshdns/pkg/nametable"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// world is an Ingest with what it published and its log. Its settings
// convert to a string (newSettingsWorld); without a conversion, "".
type world struct {
	in *Ingest[string]
	// published are the tables served in order, of versions committed
	// and swapped in between; served the versions committed.
	published []*nametable.Table
	served    []*Served[string]
	log       bytes.Buffer
}

func newWorld(t *testing.T) *world {
	t.Helper()
	return newSettingsWorld(t, nil)
}

// newSettingsWorld is a world whose settings convert with conv.
func newSettingsWorld(t *testing.T, conv func(*namewire.AgentSettings) (string, error)) *world {
	t.Helper()
	w := &world{}
	in, err := New(Config[string]{
		Pod:      nametable.Context{Namespace: "demo"},
		Settings: conv,
		Publish: func(s *Served[string]) {
			w.published = append(w.published, s.Table)
			w.served = append(w.served, s)
		},
		Swap:     func(t *nametable.Table) { w.published = append(w.published, t) },
		Logger:   slog.New(slog.NewTextHandler(&w.log, nil)),
		Registry: meshmetrics.NewRegistry(),
	})
	if err != nil {
		t.Fatal(err)
	}
	w.in = in
	return w
}

// applies returns the count of applies by strategy.
func (w *world) applies() map[string]int {
	out := map[string]int{}
	for _, s := range strategies {
		out[s] = int(w.in.m.applies.WithLabelValues(s).Value())
	}
	return out
}

func names(n int, gen int, zones ...string) *meshdnsv1.NameTable {
	nt := &meshdnsv1.NameTable{Table: map[string]*meshdnsv1.NameInfo{}, AuthoritativeZones: zones}
	for i := range n {
		nt.Table[fmt.Sprintf("svc-%d.example.org", i)] = &meshdnsv1.NameInfo{Ips: []string{fmt.Sprintf("10.%d.%d.%d", gen, i>>8, i&255)}}
	}
	return nt
}

func lookupA(t *testing.T, tb *nametable.Table, name string) string {
	t.Helper()
	res := tb.Lookup(dns.Question{Name: name + ".", Qtype: dns.TypeA, Qclass: dns.ClassINET})
	if res.Action != nametable.Answer || len(res.Answer) != 1 {
		return fmt.Sprintf("rcode %d, %d answers", res.Rcode, len(res.Answer))
	}
	return res.Answer[0].(*dns.A).A.String()
}

// A replacement first hands the DNS server the table it serves again (which
// starts it on an empty answer cache, so the old cache is garbage before
// the build rather than beside it), then the new table; a rejected one
// leaves the old table served.
func TestApplyDropsAnswersFirst(t *testing.T) {
	w := newWorld(t)
	if err := w.in.Apply(SourceControlPlane, protoVersion(t, "v1", names(3, 1))); err != nil {
		t.Fatal(err)
	}
	first := w.in.Current().Table
	if len(w.published) != 1 || w.published[0] != first {
		t.Fatalf("first table: published %v, want only the table", w.published)
	}
	if err := w.in.Apply(SourceControlPlane, protoVersion(t, "v2", names(3, 2))); err != nil {
		t.Fatal(err)
	}
	// Every name changed: the stages (served one by one) come between.
	second := w.in.Current().Table
	if len(w.published) < 3 || w.published[1] != first || w.published[len(w.published)-1] != second {
		t.Fatalf("replacement: published %v, want the old table again, then the new", w.published)
	}
	bad := names(3, 3)
	bad.Table["svc-1.example.org"].Ips = []string{"bad"}
	if err := w.in.Apply(SourceControlPlane, protoVersion(t, "v3", bad)); err == nil {
		t.Fatal("a bad address was applied")
	}
	cur := w.in.Current()
	if cur.Version != "v2" || w.published[len(w.published)-1] != cur.Table {
		t.Errorf("after a rejected table: serving %s, want v2 published last", cur.Version)
	}
	if got := lookupA(t, cur.Table, "svc-1.example.org"); got != "10.2.0.1" {
		t.Errorf("svc-1.example.org A = %s after a rejected table, want v2's 10.2.0.1", got)
	}
}

// The planner patches a change of at most hashdiff.MaxPatchShare of the
// names into the table served (the patched table shares its storage: what
// it replaced shows as garbage) and builds anything else whole; either
// way the table answers as one built from scratch, and each decision is
// counted and logged with its reason. A larger change is staged: every
// name replaced in patches of the table serving, which leaves no garbage.
// A patch or a stage that fails is built whole, which rejects an invalid
// table; the last good table then serves.
func TestPlanner(t *testing.T) {
	const n = 40
	small := names(n, 1, "example.org")
	small.Table["svc-3.example.org"].Ips = []string{"10.9.9.9"}
	delete(small.Table, "svc-4.example.org")
	small.Table["new.example.org"] = &meshdnsv1.NameInfo{Ips: []string{"10.9.9.8"}}
	badSmall := names(n, 1, "example.org")
	badSmall.Table["svc-3.example.org"].Ips = []string{"bad"}
	// Every name changed, and the last one bad: found by the last stage.
	badAll := names(n, 2, "example.org")
	badAll.Table["late.example.org"] = &meshdnsv1.NameInfo{Ips: []string{"bad"}}
	// Every name changed, and the first takes the name of another as an
	// alternate name: its stage comes before the other's is removed.
	moved := names(n, 2, "example.org")
	moved.Table["svc-0.example.org"].AltHosts = []string{"svc-39.example.org"}
	delete(moved.Table, "svc-39.example.org")
	tests := []struct {
		name string
		next *meshdnsv1.NameTable
		// strategies are those decided for next, in order; the last
		// one's reason is logged.
		strategies []string
		reason     string
		patched    bool
		wantErr    bool
	}{
		{name: "a few names changed: patched", next: small, strategies: []string{strategyPatch}, reason: "2 of 40 names changed", patched: true},
		{name: "the same table: patched with nothing", next: names(n, 1, "example.org"), strategies: []string{strategyPatch}, reason: "0 of 40 names changed"},
		{name: "every name changed: staged", next: names(n, 2, "example.org"), strategies: []string{strategyStaged}, reason: "40 of 40 names changed: more than a patch",
			patched: true}, // a small table's one chunk keeps its zone apex and the old names
		{name: "a stage refused: built whole", next: moved, strategies: []string{strategyStaged, strategyBuild}, reason: "staged patches failed"},
		{name: "an invalid stage: built whole, rejected", next: badAll, strategies: []string{strategyStaged, strategyBuild, strategyBuild},
			reason: "the last good version again", wantErr: true},
		{name: "zones changed: built whole", next: names(n, 1, "example.org", "example.com"), strategies: []string{strategyBuild}, reason: "the zones changed"},
		{name: "an invalid patch: built whole, rejected", next: badSmall, strategies: []string{strategyBuild}, reason: "patch failed", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t)
			if err := w.in.Apply(SourceFile, protoVersion(t, "v1", names(n, 1, "example.org"))); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(map[string]int{strategyBuild: 1, strategyPatch: 0, strategyStaged: 0}, w.applies()); diff != "" {
				t.Errorf("first table: applies (-want +got):\n%s", diff)
			}
			err := w.in.Apply(SourceFile, protoVersion(t, "v2", tt.next))
			if (err != nil) != tt.wantErr {
				t.Fatalf("Apply: %v, want error %v", err, tt.wantErr)
			}
			want := map[string]int{strategyBuild: 1, strategyPatch: 0, strategyStaged: 0}
			for _, s := range tt.strategies {
				want[s]++
			}
			if diff := cmp.Diff(want, w.applies()); diff != "" {
				t.Errorf("applies (-want +got):\n%s", diff)
			}
			last := tt.strategies[len(tt.strategies)-1]
			if !strings.Contains(w.log.String(), "strategy="+last) || !strings.Contains(w.log.String(), tt.reason) {
				t.Errorf("log does not give strategy %s for %q:\n%s", last, tt.reason, w.log.String())
			}
			cur := w.in.Current()
			if tt.wantErr {
				if cur.Version != "v1" {
					t.Errorf("serving %s after a rejected table, want v1", cur.Version)
				}
				// The last good table answers, whatever the stages
				// served before the new one proved invalid.
				if got := lookupA(t, cur.Table, "svc-5.example.org"); got != "10.1.0.5" {
					t.Errorf("svc-5.example.org A = %s after a rejected table, want 10.1.0.5", got)
				}
				if w.published[len(w.published)-1] != cur.Table {
					t.Errorf("the table served is not the one published last")
				}
				return
			}
			wantTable, _, err := build(protoVersion(t, "v2", tt.next), w.in.lim, w.in.cfg.Pod, false)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(wantTable.Names(), cur.Table.Names()); diff != "" {
				t.Errorf("names (-built whole +applied):\n%s", diff)
			}
			if cur.Names != len(tt.next.Table) || cur.Version != "v2" {
				t.Errorf("served %d names at %s, want %d at v2", cur.Names, cur.Version, len(tt.next.Table))
			}
			if w.published[len(w.published)-1] != cur.Table {
				t.Errorf("the table served is not the one published last")
			}
			for host, info := range tt.next.Table {
				if got := lookupA(t, cur.Table, host); got != info.Ips[0] {
					t.Errorf("%s A = %s, want %s", host, got, info.Ips[0])
				}
			}
			if patched := cur.Table.Garbage() > 0; patched != tt.patched {
				t.Errorf("garbage %.2f: patched %v, want %v", cur.Table.Garbage(), patched, tt.patched)
			}
		})
	}
}

// The file and the stream are compared in one form: the same table from
// the file (JSON) after the stream (wire) is a patch of nothing, and a
// version whose content went away is built whole.
func TestPlannerAcrossSources(t *testing.T) {
	w := newWorld(t)
	if err := w.in.Apply(SourceState, protoVersion(t, "v1", names(10, 1, "example.org"))); err != nil {
		t.Fatal(err)
	}
	file := []byte(`{"authoritativeZones": ["example.org"], "table": {`)
	for i := range 10 {
		if i > 0 {
			file = append(file, ',')
		}
		file = fmt.Appendf(file, `"svc-%d.example.org": {"ips": ["10.1.0.%d"]}`, i, i)
	}
	file = append(file, "}}"...)
	if err := w.in.Apply(SourceFile, newFileVersion(bytes.NewReader(file), int64(len(file)), sha256.Sum256(file))); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(w.log.String(), "0 of 10 names changed") {
		t.Errorf("the same table from the file was not a patch of nothing:\n%s", w.log.String())
	}
	// The file is rewritten in place: its version no longer walks, and
	// the next version is built whole.
	copy(file[len(file)-10:], "XXXXXXXX}}")
	if err := w.in.Apply(SourceControlPlane, protoVersion(t, "v3", names(10, 1, "example.org"))); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(w.log.String(), "comparison failed") {
		t.Errorf("a version whose content changed was compared:\n%s", w.log.String())
	}
	if _, err := w.in.Current().Dump(); err != nil {
		t.Errorf("dump: %v", err)
	}
}

// A file version converted ahead walks as its JSON does, and a change of
// nothing from the stream to it is a patch of nothing.
func TestFileVersionConverted(t *testing.T) {
	file := []byte(`{"table": {"svc-0.example.org": {"ips": ["10.1.0.0"], "ports": [{"name": "http", "port": 80}]}}, "authoritativeZones": ["example.org"]}`)
	v := newFileVersion(bytes.NewReader(file), int64(len(file)), sha256.Sum256(file))
	json, err := (&Served[string]{v: v}).Dump()
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Convert(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close() })
	wire, err := (&Served[string]{v: v}).Dump()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(json, wire, cmpopts.IgnoreUnexported(namewire.NameInfo{})); diff != "" {
		t.Errorf("(-JSON +converted):\n%s", diff)
	}
	w := newWorld(t)
	if err := w.in.Apply(SourceControlPlane, memVersion("v1", wireFromDump(t, json))); err != nil {
		t.Fatal(err)
	}
	if err := w.in.Apply(SourceFile, v); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(w.log.String(), "0 of 1 names changed") {
		t.Errorf("the same table converted was not a patch of nothing:\n%s", w.log.String())
	}
}
