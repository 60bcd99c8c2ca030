package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/agent/ingest"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

// tableJSON is a one-name table file.
func tableJSON(name, ip string) string {
	return `{"table": {"` + name + `": {"ips": ["` + ip + `"], "registry": "File"}}, "authoritative_zones": ["cluster.local"]}`
}

func TestFileHotReload(t *testing.T) {
	up := startUpstream(t)
	path := writeFile(t, t.TempDir(), "nametable.json", tableJSON("a.demo.svc.cluster.local", "10.0.0.1"))
	a := startAgent(t, Config{NameTableFile: path, Upstreams: []string{up.addr}})
	eventually(t, "ready", a.Ready)

	answers := func(name string) []string {
		return answerData(exchange(t, "udp", a.dns, name, dns.TypeA))
	}
	rejections := func() float64 {
		return counter(t, a.cfg.Registry, "meshdns_agent_table_rejections_total", "source", ingest.SourceFile)
	}

	// wantRejections counts the rejections a step adds. A step that writes
	// in place (truncate, then write) may add one more: the watcher can read
	// the file empty between the two, which is rejected and then fixed by
	// the next event. The final table is the same either way.
	steps := []struct {
		name           string
		content        string
		rename         bool // replace by rename instead of writing in place
		wantName       string
		wantIP         string
		wantRejections float64
	}{
		{name: "rewrite in place", content: tableJSON("b.demo.svc.cluster.local", "10.0.0.2"),
			wantName: "b.demo.svc.cluster.local", wantIP: "10.0.0.2"},
		{name: "atomic rename", content: tableJSON("c.demo.svc.cluster.local", "10.0.0.3"), rename: true,
			wantName: "c.demo.svc.cluster.local", wantIP: "10.0.0.3"},
		{name: "not json keeps the last good table", content: `{"table": `, rename: true,
			wantName: "c.demo.svc.cluster.local", wantIP: "10.0.0.3", wantRejections: 1},
		{name: "unknown field keeps the last good table", content: `{"tabel": {}}`,
			wantName: "c.demo.svc.cluster.local", wantIP: "10.0.0.3", wantRejections: 1},
		{name: "bad address keeps the last good table", content: tableJSON("d.demo.svc.cluster.local", "10.0.0.300"), rename: true,
			wantName: "c.demo.svc.cluster.local", wantIP: "10.0.0.3", wantRejections: 1},
		{name: "good file after bad ones", content: tableJSON("e.demo.svc.cluster.local", "10.0.0.5"), rename: true,
			wantName: "e.demo.svc.cluster.local", wantIP: "10.0.0.5"},
	}
	prevInPlace := false
	for _, st := range steps {
		// A write in place may add its extra rejection after its own
		// step's check: the next step allows it too.
		slack := !st.rename || prevInPlace
		prevInPlace = !st.rename
		t.Run(st.name, func(t *testing.T) {
			base := rejections()
			if st.rename {
				testenv.ReplaceFile(t, path, st.content)
			} else if err := os.WriteFile(path, []byte(st.content), 0o644); err != nil {
				t.Fatal(err)
			}
			want := []string{st.wantName + ". A " + st.wantIP}
			eventually(t, st.wantName+" served", func() bool { return cmp.Equal(want, answers(st.wantName)) })
			eventually(t, "rejection count", func() bool { return rejections()-base >= st.wantRejections })
			if got, most := rejections()-base, st.wantRejections; got > most && (!slack || got > most+1) {
				t.Errorf("%v rejections, want %v", got, most)
			}
			if !a.Ready() {
				t.Error("not ready")
			}
			// The dump walks the version served (through the descriptor
			// it was read from): after a rejection it shows the last
			// good table, never the bad one.
			if code, body := httpGet(t, a.admin+"/debug/nametable"); code != 200 || !strings.Contains(body, `"`+st.wantName+`"`) {
				t.Errorf("/debug/nametable = %d, want 200 with %s\n%s", code, st.wantName, body)
			}
		})
	}
}

// manyJSON is a table file of n names, the addresses of generation gen;
// bad, if not "", is the name whose address is not one.
func manyJSON(n, gen int, bad string) string {
	var b strings.Builder
	b.WriteString(`{"table": {`)
	for i := range n {
		if i > 0 {
			b.WriteString(",")
		}
		name := fmt.Sprintf("svc-%d.demo.svc.cluster.local", i)
		ip := fmt.Sprintf("10.%d.%d.%d", gen, i>>8, i&255)
		if name == bad {
			ip = "10.0.0.300"
		}
		fmt.Fprintf(&b, `"%s": {"ips": ["%s"]}`, name, ip)
	}
	b.WriteString(`}, "authoritativeZones": ["cluster.local"]}`)
	return b.String()
}

// A new file that changes every name is applied in stages through the
// real agent, and one that is bad in its last stage leaves the last good
// table answering.
func TestFileStagedReplacement(t *testing.T) {
	const n = 10_000 // ten chunks of 1,024 nodes: a staged table is little garbage
	up := startUpstream(t)
	path := writeFile(t, t.TempDir(), "nametable.json", manyJSON(n, 1, ""))
	a := startAgent(t, Config{NameTableFile: path, Upstreams: []string{up.addr}})
	eventually(t, "ready", a.Ready)
	answer := func(i int) []string {
		return answerData(exchange(t, "udp", a.dns, fmt.Sprintf("svc-%d.demo.svc.cluster.local", i), dns.TypeA))
	}
	want := func(i, gen int) []string {
		return []string{fmt.Sprintf("svc-%d.demo.svc.cluster.local. A 10.%d.%d.%d", i, gen, i>>8, i&255)}
	}
	applies := func(strategy string) float64 {
		return counter(t, a.cfg.Registry, "meshdns_agent_table_applies_total", "strategy", strategy)
	}

	updates := func() float64 {
		return counter(t, a.cfg.Registry, "meshdns_agent_table_updates_total", "source", ingest.SourceFile)
	}
	testenv.ReplaceFile(t, path, manyJSON(n, 2, ""))
	// Applied once the last stage is in (the stages before are served
	// as the old version).
	eventually(t, "the new file applied", func() bool { return updates() == 2 })
	if got := applies("staged"); got != 1 {
		t.Errorf("%v staged changes, want 1", got)
	}
	for i := 0; i < n; i += 97 {
		if diff := cmp.Diff(want(i, 2), answer(i)); diff != "" {
			t.Fatalf("after the stages (-want +got):\n%s", diff)
		}
	}

	rejections := counter(t, a.cfg.Registry, "meshdns_agent_table_rejections_total", "source", ingest.SourceFile)
	testenv.ReplaceFile(t, path, manyJSON(n, 3, fmt.Sprintf("svc-%d.demo.svc.cluster.local", n-1)))
	eventually(t, "the bad file rejected", func() bool {
		return counter(t, a.cfg.Registry, "meshdns_agent_table_rejections_total", "source", ingest.SourceFile) > rejections
	})
	if got, builds := applies("staged"), applies("build"); got != 2 || builds != 3 {
		t.Errorf("%v staged changes and %v builds, want 2 and 3 (the start, the bad file, the last good again)", got, builds)
	}
	for _, i := range []int{0, n / 2, n - 1} {
		if diff := cmp.Diff(want(i, 2), answer(i)); diff != "" {
			t.Errorf("after a rejected file (-want +got):\n%s", diff)
		}
	}
}

// TestFileSymlinkSwap replaces the file the way the kubelet updates a
// mounted ConfigMap: the file is a symlink through ..data, a symlink to a
// timestamped directory, and an update renames a new ..data over the old.
func TestFileSymlinkSwap(t *testing.T) {
	up := startUpstream(t)
	dir := t.TempDir()
	testenv.UpdateConfigMapVolume(t, dir, map[string]string{"nametable.json": tableJSON("old.demo.svc.cluster.local", "10.0.1.1")})

	// A long poll interval: the directory events must do it alone.
	a := startAgent(t, Config{NameTableFile: filepath.Join(dir, "nametable.json"), Upstreams: []string{up.addr}, FilePollInterval: time.Hour})
	eventually(t, "ready", a.Ready)
	if got := answerData(exchange(t, "udp", a.dns, "old.demo.svc.cluster.local", dns.TypeA)); len(got) != 1 {
		t.Fatalf("old name not served: %v", got)
	}

	testenv.UpdateConfigMapVolume(t, dir, map[string]string{"nametable.json": tableJSON("new.demo.svc.cluster.local", "10.0.1.2")})

	want := []string{"new.demo.svc.cluster.local. A 10.0.1.2"}
	eventually(t, "new table after the swap", func() bool {
		return cmp.Equal(want, answerData(exchange(t, "udp", a.dns, "new.demo.svc.cluster.local", dns.TypeA)))
	})
	if m := exchange(t, "udp", a.dns, "old.demo.svc.cluster.local", dns.TypeA); m.Rcode != dns.RcodeNameError {
		t.Errorf("old name rcode = %s, want NXDOMAIN", dns.RcodeToString[m.Rcode])
	}
}

func TestFilePollFallback(t *testing.T) {
	// With events lost (network file systems), the stat on each poll tick
	// still finds the change. The file sits in a directory the watcher
	// does not see: the table path is a symlink into it.
	up := startUpstream(t)
	real := t.TempDir()
	target := writeFile(t, real, "table.json", tableJSON("p1.demo.svc.cluster.local", "10.0.2.1"))
	link := filepath.Join(t.TempDir(), "nametable.json")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	a := startAgent(t, Config{NameTableFile: link, Upstreams: []string{up.addr}, FilePollInterval: 50 * time.Millisecond})
	eventually(t, "ready", a.Ready)
	testenv.ReplaceFile(t, target, tableJSON("p2.demo.svc.cluster.local", "10.0.2.2"))
	want := []string{"p2.demo.svc.cluster.local. A 10.0.2.2"}
	eventually(t, "polled change", func() bool {
		return cmp.Equal(want, answerData(exchange(t, "udp", a.dns, "p2.demo.svc.cluster.local", dns.TypeA)))
	})
}

func TestBadFileAtStart(t *testing.T) {
	up := startUpstream(t)
	path := writeFile(t, t.TempDir(), "nametable.json", "not json")
	a := startAgent(t, Config{NameTableFile: path, Upstreams: []string{up.addr}})
	// Before any table: not ready, SERVFAIL in the cluster zone (never a
	// false NXDOMAIN), other names forwarded.
	if code, _ := httpGet(t, a.admin+"/healthz/ready"); code != 503 {
		t.Errorf("ready = %d, want 503", code)
	}
	if m := exchange(t, "udp", a.dns, "web.demo.svc.cluster.local", dns.TypeA); m.Rcode != dns.RcodeServerFailure {
		t.Errorf("cluster name rcode = %s, want SERVFAIL", dns.RcodeToString[m.Rcode])
	}
	if m := exchange(t, "udp", a.dns, "example.com", dns.TypeA); len(m.Answer) != 1 {
		t.Errorf("forwarded answer = %v", m.Answer)
	}
	testenv.ReplaceFile(t, path, readExample(t))
	eventually(t, "ready", a.Ready)
	if code, _ := httpGet(t, a.admin+"/healthz/ready"); code != 200 {
		t.Errorf("ready = %d, want 200", code)
	}
}

// TestReloadUnderLoad swaps tables while queries run: every answer must
// come from one table or the other, never an error or an empty answer.
func TestReloadUnderLoad(t *testing.T) {
	up := startUpstream(t)
	path := writeFile(t, t.TempDir(), "nametable.json", tableJSON("web.demo.svc.cluster.local", "10.0.0.1"))
	a := startAgent(t, Config{NameTableFile: path, Upstreams: []string{up.addr}})
	eventually(t, "ready", a.Ready)

	stop := make(chan struct{})
	errs := make(chan string, 1)
	var queries atomic.Int64
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			c := &dns.Client{Timeout: 2 * time.Second}
			m := new(dns.Msg)
			m.SetQuestion("web.demo.svc.cluster.local.", dns.TypeA)
			for {
				select {
				case <-stop:
					return
				default:
				}
				r, _, err := c.Exchange(m, a.dns)
				queries.Add(1)
				var bad string
				switch {
				case err != nil:
					bad = err.Error()
				case r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1:
					bad = r.String()
				default:
					if ip := r.Answer[0].(*dns.A).A.String(); ip != "10.0.0.1" && ip != "10.0.0.2" {
						bad = "unexpected address " + ip
					}
				}
				if bad != "" {
					select {
					case errs <- bad:
					default:
					}
					return
				}
			}
		})
	}
	for i := range 20 {
		testenv.ReplaceFile(t, path, tableJSON("web.demo.svc.cluster.local", fmt.Sprintf("10.0.0.%d", 1+(i+1)%2)))
		want := float64(i + 2)
		eventually(t, "reload", func() bool {
			return counter(t, a.cfg.Registry, "meshdns_agent_table_updates_total", "source", ingest.SourceFile) >= want
		})
	}
	close(stop)
	wg.Wait()
	select {
	case e := <-errs:
		t.Fatalf("bad answer during reloads: %s", e)
	default:
	}
	if queries.Load() < 20 {
		t.Errorf("only %d queries during the reloads", queries.Load())
	}
}
