package agent

import (
	"testing"
	"time"

	meshmetrics "github.com/meshdns/meshdns/internal/metrics"
	"github.com/meshdns/meshdns/pkg/nametable"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// A replacement first hands the DNS server the table it serves again (which
// starts it on an empty answer cache, so the old cache is garbage before
// the build rather than beside it), then the new table; a rejected one
// leaves the old table served.
func TestBuildDropsAnswersFirst(t *testing.T) {
	m, err := newMetrics(meshmetrics.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	var published []*nametable.Table
	ts := &tables{pod: nametable.Context{Namespace: "demo"}, m: m, now: time.Now,
		publish: func(t *nametable.Table) { published = append(published, t) }}
	nt := func(ip string) *meshdnsv1.NameTable {
		return &meshdnsv1.NameTable{Table: map[string]*meshdnsv1.NameInfo{"a.example": {Ips: []string{ip}}}}
	}
	if err := ts.apply(sourceControlPlane, "v1", nt("10.0.0.1")); err != nil {
		t.Fatal(err)
	}
	first := ts.current().Table
	if len(published) != 1 || published[0] != first {
		t.Fatalf("first table: published %v, want only the table", published)
	}
	if err := ts.apply(sourceControlPlane, "v2", nt("10.0.0.2")); err != nil {
		t.Fatal(err)
	}
	second := ts.current().Table
	if len(published) != 3 || published[1] != first || published[2] != second {
		t.Fatalf("replacement: published %v, want the old table again, then the new", published)
	}
	if err := ts.apply(sourceControlPlane, "v3", nt("bad")); err == nil {
		t.Fatal("a bad address was applied")
	}
	if ts.current().Table != second || published[len(published)-1] != second {
		t.Errorf("after a rejected table the served table changed")
	}
}
