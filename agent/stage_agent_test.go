package agent

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/agent/discovery/discoverytest"
	"github.com/meshdns/meshdns/internal/testenv"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// The staged replacement in a real agent: a table file, and a full table
// from a control plane, that change every name's address are applied in
// stages (the table served afterwards is a patched one: it shares storage,
// Garbage > 0), every name answers its new address afterwards (from the
// table served, and every 50th over UDP), and the version is applied
// once; one that also carries a bad address fails in a stage and leaves
// the old version answering every name.

// stagedNames is enough names that the chunks the stages cannot free (the
// first, which holds the zone apex, and the last) are less than a quarter
// of the table, the garbage past which a change is built whole.
const stagedNames = 10000

func stagedName(i int) string { return fmt.Sprintf("svc-%d.ns-%d.svc.cluster.local", i, i%10) }

func stagedAddr(i, gen int) string { return fmt.Sprintf("10.%d.%d.%d", gen, byte(i>>8), byte(i)) }

// stagedJSON is the table file of generation gen; bad, when >= 0, is a
// name given an invalid address.
func stagedJSON(gen, bad int) string {
	var b strings.Builder
	b.WriteString(`{"authoritative_zones": ["cluster.local"], "table": {`)
	for i := range stagedNames {
		if i > 0 {
			b.WriteByte(',')
		}
		addr := stagedAddr(i, gen)
		if i == bad {
			addr = "10.0.0.300"
		}
		fmt.Fprintf(&b, "\n%q: {\"ips\": [%q], \"registry\": \"Kubernetes\"}", stagedName(i), addr)
	}
	b.WriteString("\n}}\n")
	return b.String()
}

func stagedTable(gen, bad int) *meshdnsv1.NameTable {
	names := make(map[string]string, stagedNames)
	for i := range stagedNames {
		names[stagedName(i)] = stagedAddr(i, gen)
		if i == bad {
			names[stagedName(i)] = "10.0.0.300"
		}
	}
	return cpTable(names)
}

// checkEveryName checks the answer of every name in the table the agent
// serves, and of every 50th over UDP.
func checkEveryName(t *testing.T, a *testAgent, gen int) {
	t.Helper()
	tbl := a.tables.current().Table
	wrong := 0
	for i := range stagedNames {
		if got, want := answer(tbl, stagedName(i)), stagedAddr(i, gen); got != want {
			if wrong++; wrong <= 5 {
				t.Errorf("%s answers %s, want %s", stagedName(i), got, want)
			}
		}
	}
	if wrong > 0 {
		t.Fatalf("%d of %d names answer wrong", wrong, stagedNames)
	}
	c := &dns.Client{Net: "udp"}
	conn, err := c.Dial(a.dns)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for i := 0; i < stagedNames; i += 50 {
		m := new(dns.Msg)
		m.SetQuestion(stagedName(i)+".", dns.TypeA)
		r, _, err := c.ExchangeWithConn(m, conn)
		if err != nil {
			t.Fatalf("%s: %v", stagedName(i), err)
		}
		want := stagedName(i) + ". A " + stagedAddr(i, gen)
		if got := answerData(r); len(got) != 1 || got[0] != want {
			t.Fatalf("%s answers %v over UDP, want %s", stagedName(i), got, want)
		}
	}
}

func TestStagedFileReplacement(t *testing.T) {
	up := startUpstream(t)
	path := writeFile(t, t.TempDir(), "nametable.json", stagedJSON(1, -1))
	a := startAgent(t, Config{NameTableFile: path, Upstreams: []string{up.addr}})
	eventually(t, "ready", a.Ready)
	checkEveryName(t, a, 1)
	updates := func() float64 { return a.m.updates.WithLabelValues(sourceFile).Value() }
	rejections := func() float64 { return a.m.rejections.WithLabelValues(sourceFile).Value() }
	before := updates()

	testenv.ReplaceFile(t, path, stagedJSON(2, -1))
	eventually(t, "the last name new", func() bool {
		return answer(a.tables.current().Table, stagedName(stagedNames-1)) == stagedAddr(stagedNames-1, 2)
	})
	checkEveryName(t, a, 2)
	cur := a.tables.current()
	if cur.Names != stagedNames || cur.Partial || cur.Table.Garbage() == 0 {
		t.Errorf("served %d names (partial %v, garbage %.2f), want %d from stages", cur.Names, cur.Partial, cur.Table.Garbage(), stagedNames)
	}
	if got := updates() - before; got != 1 {
		t.Errorf("%v updates for one new file, want 1", got)
	}

	// Every name changes again, and one in the middle has a bad address:
	// rejected, and the version before answers every name.
	good := a.tables.current()
	testenv.ReplaceFile(t, path, stagedJSON(3, stagedNames/2))
	eventually(t, "the bad file rejected", func() bool { return rejections() == 1 })
	cur = a.tables.current()
	if cur.Version != good.Version || cur.Partial {
		t.Errorf("serving %s (partial %v) after a rejected file, want %s", cur.Version, cur.Partial, good.Version)
	}
	if cur.Table == good.Table {
		t.Error("the table served is the one before: the file was not applied in stages")
	}
	checkEveryName(t, a, 2)
	if got := updates() - before; got != 1 {
		t.Errorf("%v updates, want 1", got)
	}
}

func TestStagedStreamReplacement(t *testing.T) {
	for _, stateDir := range []bool{false, true} {
		t.Run(map[bool]string{false: "memory", true: "state dir"}[stateDir], func(t *testing.T) {
			up := startUpstream(t)
			cp := discoverytest.Start(t, "127.0.0.1:0", nil)
			cfg := Config{ControlPlanes: []string{cp.Addr}, Upstreams: []string{up.addr}}
			if stateDir {
				cfg.StateDir = t.TempDir()
			}
			a := startAgent(t, cfg)
			cp.Recv(t)
			cp.Send(discoverytest.Full("v1", "n1", stagedTable(1, -1)))
			if ack := cp.Recv(t); ack.GetVersionInfo() != "v1" || ack.GetErrorDetail() != nil {
				t.Fatalf("ack = %v", ack)
			}
			eventually(t, "ready", a.Ready)

			// A full table changing every name (a new control plane
			// that does not know v1): staged, ACKed once.
			cp.Send(discoverytest.Full("v2", "n2", stagedTable(2, -1)))
			if ack := cp.Recv(t); ack.GetVersionInfo() != "v2" || ack.GetErrorDetail() != nil {
				t.Fatalf("ack = %v", ack)
			}
			cp.NoRecv(t, 200*time.Millisecond)
			cur := a.tables.current()
			if cur.Version != "v2" || cur.Names != stagedNames || cur.Table.Garbage() == 0 {
				t.Errorf("served %s with %d names (garbage %.2f), want v2 with %d from stages", cur.Version, cur.Names, cur.Table.Garbage(), stagedNames)
			}
			checkEveryName(t, a, 2)

			// Every name changes again, one to a bad address: NACKed,
			// v2 answers every name.
			cp.Send(discoverytest.Full("v3", "n3", stagedTable(3, stagedNames/2)))
			nack := cp.Recv(t)
			if nack.GetVersionInfo() != "v2" || nack.GetErrorDetail() == nil {
				t.Fatalf("nack = %v", nack)
			}
			cp.NoRecv(t, 200*time.Millisecond)
			cur2 := a.tables.current()
			if cur2.Version != "v2" || cur2.Partial || cur2.Table == cur.Table {
				t.Errorf("serving %s (partial %v, same table %v) after a NACK, want v2 restored from undone stages", cur2.Version, cur2.Partial, cur2.Table == cur.Table)
			}
			checkEveryName(t, a, 2)
		})
	}
}
