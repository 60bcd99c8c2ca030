package bench

import (
	"context"
	"net"
	"net/netip"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	godnstap "github.com/dnstap/golang-dnstap"
	"google.golang.org/protobuf/proto"

	"github.com/meshdns/meshdns/pkg/dnstap"
)

// message is a CLIENT_RESPONSE as the agent logs one: a pod's query over
// UDP and its answer, of the sizes of an A query and a two-record answer.
func message() *dnstap.Message {
	at := time.Unix(1_700_000_000, 123_456_789)
	return &dnstap.Message{
		Type: dnstap.ClientResponse, Protocol: dnstap.UDP,
		QueryAddr:    netip.MustParseAddrPort("10.1.2.3:40123"),
		ResponseAddr: netip.MustParseAddrPort("127.0.0.1:15053"),
		QueryTime:    at, ResponseTime: at.Add(80 * time.Microsecond),
		QueryMessage: make([]byte, 48), ResponseMessage: make([]byte, 112),
	}
}

// generated is the same message in golang-dnstap's generated types, built
// as a writer on that library builds one per query.
func generated(m *dnstap.Message) *godnstap.Dnstap {
	typ := godnstap.Dnstap_MESSAGE
	mt := godnstap.Message_CLIENT_RESPONSE
	fam := godnstap.SocketFamily_INET
	prot := godnstap.SocketProtocol_UDP
	qport, rport := uint32(m.QueryAddr.Port()), uint32(m.ResponseAddr.Port())
	qsec, qnsec := uint64(m.QueryTime.Unix()), uint32(m.QueryTime.Nanosecond())
	rsec, rnsec := uint64(m.ResponseTime.Unix()), uint32(m.ResponseTime.Nanosecond())
	qa, ra := m.QueryAddr.Addr().AsSlice(), m.ResponseAddr.Addr().AsSlice()
	return &godnstap.Dnstap{
		Type: &typ, Identity: []byte("demo/web-0"), Version: []byte("meshdns v1"),
		Message: &godnstap.Message{
			Type: &mt, SocketFamily: &fam, SocketProtocol: &prot,
			QueryAddress: qa, ResponseAddress: ra, QueryPort: &qport, ResponsePort: &rport,
			QueryTimeSec: &qsec, QueryTimeNsec: &qnsec, ResponseTimeSec: &rsec, ResponseTimeNsec: &rnsec,
			QueryMessage: m.QueryMessage, ResponseMessage: m.ResponseMessage,
		},
	}
}

// TestSamePayload: both encode the message to the same bytes, so the
// benchmarks compare the same work.
func TestSamePayload(t *testing.T) {
	m := message()
	ours := dnstap.AppendPayload(nil, "demo/web-0", "meshdns v1", m)
	theirs, err := proto.MarshalOptions{Deterministic: true}.Marshal(generated(m))
	if err != nil {
		t.Fatal(err)
	}
	var a, b godnstap.Dnstap
	if err := proto.Unmarshal(ours, &a); err != nil {
		t.Fatal(err)
	}
	if err := proto.Unmarshal(theirs, &b); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(&a, &b) {
		t.Fatalf("payloads differ:\n%v\n%v", &a, &b)
	}
}

// BenchmarkPayload encodes one CLIENT_RESPONSE payload: pkg/dnstap into a
// reused buffer, golang-dnstap by building its message and proto.Marshal.
func BenchmarkPayload(b *testing.B) {
	m := message()
	b.Run("meshdns", func(b *testing.B) {
		var buf []byte
		b.ReportAllocs()
		for b.Loop() {
			buf = dnstap.AppendPayload(buf[:0], "demo/web-0", "meshdns v1", m)
		}
	})
	b.Run("golang-dnstap", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := proto.Marshal(generated(m)); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// collector is golang-dnstap's Frame Streams reader on a unix socket in a
// temporary directory, counting the frames it receives.
type collector struct {
	path string
	got  atomic.Int64
}

func startCollector(tb testing.TB) *collector {
	tb.Helper()
	c := &collector{path: filepath.Join(tb.TempDir(), "dnstap.sock")}
	ln, err := net.Listen("unix", c.path)
	if err != nil {
		tb.Fatal(err)
	}
	in := godnstap.NewFrameStreamSockInput(ln)
	frames := make(chan []byte, 1024)
	go in.ReadInto(frames)
	go func() {
		for range frames {
			c.got.Add(1)
		}
	}()
	// The listener stays open: closed, golang-dnstap's accept loop spins
	// on the error for the rest of the process, and a later benchmark
	// would pay for it.
	return c
}

// wait waits until the collector received n frames in all, or received
// none for a second (a writer that lost some), and reports the frames
// lost per op.
func (c *collector) wait(b *testing.B, n int64) {
	last, since := c.got.Load(), time.Now()
	for last < n && time.Since(since) < time.Second {
		time.Sleep(100 * time.Microsecond)
		if got := c.got.Load(); got != last {
			last, since = got, time.Now()
		}
	}
	b.ReportMetric(float64(n-last)/float64(n), "lost/op")
}

// BenchmarkWriter sends payloads to a collector on a unix socket until it
// has them all: pkg/dnstap's Writer (encoded into a buffer of its own per
// frame, as the agent's query log does), and golang-dnstap's
// FrameStreamSockOutput (golang-framestream's encoder) fed with
// proto.Marshal of its generated message. cpu-ns/op is the process's CPU
// time per frame, the collector's included (the same for both).
func BenchmarkWriter(b *testing.B) {
	m := message()
	b.Run("meshdns", func(b *testing.B) {
		c := startCollector(b)
		w, err := dnstap.New(dnstap.Config{Address: "unix://" + c.path, QueueSize: 4096})
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx) }()
		defer func() { cancel(); <-done }()
		b.ReportAllocs()
		start, n := cpuTime(b), int64(0)
		for b.Loop() {
			p := dnstap.AppendPayload(nil, "demo/web-0", "meshdns v1", m)
			for !w.Send(p) {
				time.Sleep(20 * time.Microsecond) // full queue: let the writer drain it
			}
			n++
		}
		c.wait(b, n)
		b.ReportMetric(float64((cpuTime(b)-start).Nanoseconds())/float64(n), "cpu-ns/op")
	})
	b.Run("golang-dnstap", func(b *testing.B) {
		c := startCollector(b)
		out, err := godnstap.NewFrameStreamSockOutput(&net.UnixAddr{Name: c.path, Net: "unix"})
		if err != nil {
			b.Fatal(err)
		}
		// No flush timeout: with one (SetFlushTimeout(time.Millisecond)),
		// its output stalled after a few thousand frames in most runs,
		// its flush timer and its writes waiting on each other. Without,
		// it flushes when its buffer fills, and at Close.
		go out.RunOutputLoop()
		ch := out.GetOutputChannel()
		b.ReportAllocs()
		start, n := cpuTime(b), int64(0)
		for b.Loop() {
			p, err := proto.Marshal(generated(m))
			if err != nil {
				b.Fatal(err)
			}
			select {
			case ch <- p:
			case <-time.After(5 * time.Second):
				b.Fatalf("golang-dnstap's output stalled after %d frames", n)
			}
			n++
		}
		out.Close() // flushes the frames its buffer holds
		c.wait(b, n)
		b.ReportMetric(float64((cpuTime(b)-start).Nanoseconds())/float64(n), "cpu-ns/op")
	})
}

// cpuTime is the CPU time the process has used.
func cpuTime(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
