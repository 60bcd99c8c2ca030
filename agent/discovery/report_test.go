package discovery

import (
	"sync"
	"testing"
	"time"

	"github.com/meshdns/meshdns/agent/discovery/discoverytest"
	"github.com/meshdns/meshdns/internal/namewire"
)

// TestReportRidesOnACK: a report whose window ended goes out on the ACK
// of the next version rather than on a repeat of the last ACK; before the
// window ends an ACK carries none. The clock is the client's: the
// reporter's own timer (an hour) never fires here.
func TestReportRidesOnACK(t *testing.T) {
	var mu sync.Mutex
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }

	srv := discoverytest.Start(t, "127.0.0.1:0", nil)
	rec := &recorder{}
	c := startClient(t, Config{Addrs: []string{srv.Addr}, Apply: rec.apply, Now: clock})
	takes := 0
	c.SetReport(&Report{Window: time.Hour, Take: func() []namewire.FailingName {
		takes++
		return []namewire.FailingName{{Name: "nope.example.", Rcode: 3, Count: uint64(takes)}}
	}})
	srv.Recv(t) // identity
	srv.Send(full("v1", "n1", table("a.example")))
	if ack := srv.Recv(t); ack.GetResponseNonce() != "n1" || ack.GetFailing() != nil {
		t.Fatalf("ACK within the window: %v, want no report", ack)
	}
	advance(time.Hour + time.Second)
	srv.Send(full("v2", "n2", table("b.example")))
	ack := srv.Recv(t)
	if ack.GetResponseNonce() != "n2" || ack.GetVersionInfo() != "v2" || ack.GetErrorDetail() != nil {
		t.Fatalf("ACK of v2: %v", ack)
	}
	f := ack.GetFailing()
	if f == nil || f.GetWindowSeconds() != 3601 || len(f.GetNames()) != 1 || f.GetNames()[0].GetCount() != 1 {
		t.Fatalf("report on the ACK: %v, want one name over the 3601s window", f)
	}
	// The next window started with that ACK: the next one carries none.
	advance(time.Minute)
	srv.Send(full("v3", "n3", table("c.example")))
	if ack := srv.Recv(t); ack.GetResponseNonce() != "n3" || ack.GetFailing() != nil {
		t.Errorf("ACK a minute into the next window: %v, want no report", ack)
	}
}
