package main

import (
	"os"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"
	"google.golang.org/protobuf/encoding/protojson"

	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// The table file the agent reads must be valid protojson with every
// service of benchEntries.
func TestWriteTableFile(t *testing.T) {
	path, err := writeTableFile(t.TempDir(), 250)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var nt meshdnsv1.NameTable
	if err := protojson.Unmarshal(b, &nt); err != nil {
		t.Fatalf("protojson: %v", err)
	}
	if len(nt.GetTable()) != 250 {
		t.Errorf("%d names, want 250", len(nt.GetTable()))
	}
	info := nt.GetTable()["svc7.ns7.svc.cluster.local"]
	got := []string{info.GetShortname(), info.GetNamespace(), info.GetIps()[0], info.GetPorts()[0].GetName()}
	if diff := cmp.Diff([]string{"svc7", "ns7", "10.0.0.7", "http"}, got); diff != "" {
		t.Errorf("svc7 (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"cluster.local"}, nt.GetAuthoritativeZones()); diff != "" {
		t.Errorf("zones (-want +got):\n%s", diff)
	}
}

func TestCPUSecondsAndRSS(t *testing.T) {
	pid := os.Getpid()
	before, err := cpuSeconds(pid)
	if err != nil {
		t.Fatal(err)
	}
	// Burn CPU until the tick counter moves (10ms ticks), or fail.
	deadline := time.Now().Add(5 * time.Second)
	x := 0
	for {
		for i := range 1_000_000 {
			x += i
		}
		after, err := cpuSeconds(pid)
		if err != nil {
			t.Fatal(err)
		}
		if after > before {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cpu time stuck at %v after 5s of work (%d)", after, x)
		}
	}
	rss, err := rssMB(pid)
	if err != nil || rss <= 0 || rss > 4096 {
		t.Errorf("rss = %v MB, %v", rss, err)
	}
}

func TestPercentile(t *testing.T) {
	v := make([]float64, 100)
	for i := range v {
		v[i] = float64(100 - i)
	}
	tests := []struct {
		name string
		p    float64
		want float64
	}{
		{name: "median", p: 0.5, want: 51},
		{name: "p99", p: 0.99, want: 100},
		{name: "min", p: 0, want: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := percentile(v, tc.p); got != tc.want {
				t.Errorf("percentile(%v) = %v, want %v", tc.p, got, tc.want)
			}
		})
	}
}

// The upstream answers A with TTL 1h, a forwarded name (fwd...) with TTL
// 0, other types with no record, and ignores what is not one question.
func TestUpstreamReply(t *testing.T) {
	tests := []struct {
		name    string
		qname   string
		qtype   uint16
		wantTTL []uint32 // one per answer record
	}{
		{name: "cached name", qname: "host1.example.com.", qtype: dns.TypeA, wantTTL: []uint32{3600}},
		{name: "forwarded name", qname: "FWD7.example.net.", qtype: dns.TypeA, wantTTL: []uint32{0}},
		{name: "other type", qname: "host1.example.com.", qtype: dns.TypeAAAA, wantTTL: []uint32{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q := new(dns.Msg)
			q.SetQuestion(tc.qname, tc.qtype)
			q.SetEdns0(1232, false)
			pkt, err := q.Pack()
			if err != nil {
				t.Fatal(err)
			}
			m := new(dns.Msg)
			if err := m.Unpack(upstreamReply(nil, pkt)); err != nil {
				t.Fatalf("unpack reply: %v", err)
			}
			if m.Id != q.Id || !m.Response || !m.RecursionDesired || m.Rcode != dns.RcodeSuccess {
				t.Errorf("header %+v, want a NOERROR response to ID %d with RD", m.MsgHdr, q.Id)
			}
			if diff := cmp.Diff(q.Question, m.Question); diff != "" {
				t.Errorf("question (-want +got):\n%s", diff)
			}
			ttls := []uint32{}
			for _, rr := range m.Answer {
				if rr.Header().Name != tc.qname || rr.(*dns.A).A.String() != "192.0.2.1" {
					t.Errorf("answer %v", rr)
				}
				ttls = append(ttls, rr.Header().Ttl)
			}
			if diff := cmp.Diff(tc.wantTTL, ttls); diff != "" {
				t.Errorf("TTLs (-want +got):\n%s", diff)
			}
		})
	}
	for name, pkt := range map[string][]byte{"short": {1, 2, 3}, "a response": {0, 1, 0x80, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1}} {
		if got := upstreamReply(nil, pkt); got != nil {
			t.Errorf("%s: reply %v, want none", name, got)
		}
	}
}
