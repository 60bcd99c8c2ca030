package server

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// typicalReport is a report of n names of about 40 bytes (a Service name
// under the ndots walk), on an ACK with a 16-digit version and a nonce.
func typicalReport(n int) *meshdnsv1.StreamNameTableRequest {
	r := &meshdnsv1.StreamNameTableRequest{VersionInfo: "0123456789abcdef", ResponseNonce: "12345",
		Failing: &meshdnsv1.FailingNames{WindowSeconds: 60}}
	for i := range n {
		name := fmt.Sprintf("svc%d.example.com.team-a.svc.cluster.local.", i)
		r.Failing.Names = append(r.Failing.Names, &meshdnsv1.FailingName{Name: name, Rcode: 3, Count: uint64(1000 + i)})
	}
	return r
}

// TestFailingReportCost states what a report costs per agent and window:
// bytes on the stream and bytes the control plane keeps. Run with -v for
// the figures.
func TestFailingReportCost(t *testing.T) {
	for _, tc := range []struct {
		names            int
		maxWire, maxKept int
	}{
		{names: 10, maxWire: 700, maxKept: 1200},
		{names: 50, maxWire: 3300, maxKept: 5500},
	} {
		t.Run(fmt.Sprint(tc.names), func(t *testing.T) {
			b, err := proto.Marshal(typicalReport(tc.names))
			if err != nil {
				t.Fatal(err)
			}
			// gRPC's 5-byte message header and HTTP/2's 9-byte frame header.
			wire := len(b) + 5 + 9
			const agents = 2000
			kept := make([]*FailingReport, agents)
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			now := time.Now()
			for i := range kept {
				var a answer
				if err := a.decode(b); err != nil {
					t.Fatal(err)
				}
				kept[i] = newFailingReport(a.failing, now)
			}
			runtime.GC()
			runtime.ReadMemStats(&after)
			perAgent := int(after.HeapAlloc-before.HeapAlloc) / agents
			runtime.KeepAlive(kept)
			t.Logf("%d names of ~%d bytes: %d bytes on the stream per window, %d bytes kept per agent",
				tc.names, len(strings.TrimSuffix(kept[0].Names[0].Name, ".")), wire, perAgent)
			if wire > tc.maxWire || perAgent > tc.maxKept {
				t.Errorf("%d bytes on the stream, %d kept; want <= %d and <= %d", wire, perAgent, tc.maxWire, tc.maxKept)
			}
		})
	}
}
