package upstream

import (
	"context"
	"encoding/binary"
	"net"
	"sync"
	"testing"

	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/internal/dnswire"
)

// maxMissAllocs bounds what the agent allocates for one forwarded miss
// (TestForwardedMissAllocs): 60 before replies were read from the wire and
// the flight's contexts thinned out, 23 after.
const maxMissAllocs = 25

// TestForwardedMissAllocs pins the allocations of a forwarded miss, from
// the question to the reply appended, against a real upstream on loopback
// UDP that allocates nothing itself, so every allocation counted is the
// agent's. The cache is on and the answer has TTL 0, as a name no cache
// keeps.
func TestForwardedMissAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts mean nothing under the race detector")
	}
	for _, tc := range []struct {
		name  string
		spelt bool // the answer's owner written out, not a pointer
	}{
		{name: "owner compressed"},
		{name: "owner spelt out", spelt: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := newTestResolver(t, Config{Upstreams: []string{quietUpstream(t, tc.spelt)}})
			q := qwire(t, "Fwd.Example.", dns.TypeA)
			ctx, cancel := context.WithCancel(context.Background()) // as the proxy's: it can end
			defer cancel()
			buf := make([]byte, 0, 512)
			miss := func() {
				out, src, err := r.AppendReply(ctx, buf[:0], q)
				if err != nil || src != SourceUpstream || binary.BigEndian.Uint16(out[6:]) != 1 {
					t.Fatalf("src %v err %v reply %x", src, err, out)
				}
			}
			miss() // the closer's goroutine, the pools
			if got := testing.AllocsPerRun(200, miss); got > maxMissAllocs {
				t.Errorf("a forwarded miss allocates %v times, want at most %d", got, maxMissAllocs)
			} else {
				t.Logf("a forwarded miss allocates %v times", got)
			}
		})
	}
}

// quietUpstream starts a UDP upstream on 127.0.0.1 that answers every A
// question with 192.0.2.1, TTL 0, and OPT when the query has it, and
// allocates nothing per query. With spelt the answer's owner is the
// question's name written out (as miekg's server sends it without
// compression), else a pointer to the question.
func quietUpstream(t testing.TB, spelt bool) string {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatalf("listen udp: %v", err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		in, out := make([]byte, 1500), make([]byte, 0, 1500)
		for {
			n, from, err := c.ReadFromUDPAddrPort(in)
			if err != nil {
				return
			}
			if out = appendQuietAnswer(out[:0], in[:n], spelt); len(out) > 0 {
				_, _ = c.WriteToUDPAddrPort(out, from)
			}
		}
	})
	t.Cleanup(func() {
		c.Close()
		wg.Wait()
	})
	return c.LocalAddr().String()
}

// appendQuietAnswer appends quietUpstream's answer to query, nothing for
// a query it cannot read.
func appendQuietAnswer(dst, query []byte, spelt bool) []byte {
	nameEnd := dnswire.SkipName(query, dnswire.HeaderLen)
	if len(query) < dnswire.HeaderLen || nameEnd < 0 || nameEnd+4 > len(query) {
		return dst
	}
	edns := binary.BigEndian.Uint16(query[10:]) > 0
	dst = append(dst, query[0], query[1], 0x81|query[2]&0x01, 0x80, 0, 1, 0, 1, 0, 0, 0, 0)
	dst = append(dst, query[dnswire.HeaderLen:nameEnd+4]...)
	if spelt {
		dst = append(dst, query[dnswire.HeaderLen:nameEnd]...)
	} else {
		dst = append(dst, 0xC0, dnswire.HeaderLen)
	}
	dst = append(dst, 0, 1, 0, 1, 0, 0, 0, 0, 0, 4, 192, 0, 2, 1)
	if edns {
		dst[11] = 1
		dst = dnswire.AppendOPT(dst, dnswire.EDNSSize, 0, false)
	}
	return dst
}
