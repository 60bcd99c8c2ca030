package proxy

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/internal/dnswire"
	"github.com/meshdns/meshdns/pkg/proxy/observe"
	"github.com/meshdns/meshdns/pkg/proxy/upstream"
)

// truncatingUpstream runs a DNS server on 127.0.0.1 that answers every UDP
// query with TC set (header and question only) and, over TCP, accepts the
// retry and fails it as tcp says: "close" at once, "length" after reading
// the length prefix, "partial" after sending part of a reply.
func truncatingUpstream(t testing.TB, tcp string) string {
	t.Helper()
	var pc net.PacketConn
	var ln net.Listener
	for i := 0; ; i++ {
		var err error
		if pc, err = net.ListenPacket("udp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		if ln, err = net.Listen("tcp", pc.LocalAddr().String()); err == nil {
			break
		}
		pc.Close()
		if i == 10 {
			t.Fatalf("listen tcp: %v", err)
		}
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { pc.Close(); ln.Close(); wg.Wait() })
	wg.Go(func() {
		buf := make([]byte, 65535)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if reply := truncatedReply(buf[:n]); reply != nil {
				_, _ = pc.WriteTo(reply, from)
			}
		}
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { failTCP(c, tcp) })
		}
	})
	return pc.LocalAddr().String()
}

// truncatedReply is the header and question of query with QR, TC and RA
// set, or nil for a packet without a plain question.
func truncatedReply(query []byte) []byte {
	off := dnswire.HeaderLen
	for off < len(query) && query[off] != 0 {
		off += 1 + int(query[off])
	}
	if off+5 > len(query) {
		return nil
	}
	out := append([]byte(nil), query[:off+5]...)
	out[2] |= 0x82 // QR, TC
	out[3] = 0x80  // RA
	binary.BigEndian.PutUint16(out[6:], 0)
	binary.BigEndian.PutUint16(out[8:], 0)
	binary.BigEndian.PutUint16(out[10:], 0)
	return out
}

// failTCP fails one TCP query on c as mode says, then closes c.
func failTCP(c net.Conn, mode string) {
	defer c.Close()
	var l [2]byte
	if mode == "close" {
		return
	}
	if _, err := io.ReadFull(c, l[:]); err != nil || mode == "length" {
		return
	}
	q := make([]byte, binary.BigEndian.Uint16(l[:]))
	if _, err := io.ReadFull(c, q); err != nil || len(q) < 2 {
		return
	}
	_, _ = c.Write([]byte{0, 60, q[0], q[1], 0x81, 0x80}) // 6 of 62 bytes
}

// stallingResolver is the real Resolver whose cache probe, which runs on
// the UDP reader, blocks on the question stallName until release is
// closed: a reader that falls behind, as a CPU-starved or paused process
// does, made to happen on cue.
type stallingResolver struct {
	*upstream.Resolver
	name    []byte        // stallName in wire form
	stalled chan struct{} // closed once the reader is held
	release chan struct{}
	once    sync.Once
}

const stallName = "stall.example.org."

func (s *stallingResolver) AppendCached(dst, qwire, key []byte, p *upstream.Probe) ([]byte, upstream.Source, bool) {
	if string(key[:len(key)-4]) == string(s.name) {
		s.once.Do(func() { close(s.stalled) })
		<-s.release
	}
	return s.Resolver.AppendCached(dst, qwire, key, p)
}

// replyCounter sends queries from a few client sockets and matches the
// replies by ID.
type replyCounter struct {
	conns []*net.UDPConn
	mu    sync.Mutex     // guards following
	got   map[uint16]int // replies per query ID
	rcode map[int]int    // replies per rcode
	wg    sync.WaitGroup
}

// newReplyCounter dials n client sockets to addr, each read by its own
// goroutine until the test ends.
func newReplyCounter(t testing.TB, addr string, n int) *replyCounter {
	t.Helper()
	rc := &replyCounter{got: map[uint16]int{}, rcode: map[int]int{}}
	for range n {
		c, err := net.Dial("udp", addr)
		if err != nil {
			t.Fatal(err)
		}
		uc := c.(*net.UDPConn)
		_ = uc.SetReadBuffer(4 << 20) // the client's queue is not under test
		rc.conns = append(rc.conns, uc)
		rc.wg.Go(func() { rc.read(uc) })
	}
	t.Cleanup(func() {
		for _, c := range rc.conns {
			c.Close()
		}
		rc.wg.Wait()
	})
	return rc
}

func (rc *replyCounter) read(c *net.UDPConn) {
	buf := make([]byte, 4096)
	for {
		n, err := c.Read(buf)
		if err != nil {
			return
		}
		m := new(dns.Msg)
		if m.Unpack(buf[:n]) != nil {
			continue
		}
		rc.mu.Lock()
		rc.got[m.Id]++
		rc.rcode[m.Rcode]++
		rc.mu.Unlock()
	}
}

// send sends query id for name from one of the sockets.
func (rc *replyCounter) send(t testing.TB, id uint16, name string) {
	t.Helper()
	m := newQuery(name, dns.TypeA)
	m.Id = id
	pkt, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rc.conns[int(id)%len(rc.conns)].Write(pkt); err != nil {
		t.Fatalf("send query %d: %v", id, err)
	}
}

// clientDrops is what the kernel dropped on the client sockets: replies
// the proxy sent that the test could not read (0 with their large
// queues, but counted so a loaded machine cannot blame the proxy).
func (rc *replyCounter) clientDrops() int {
	var n int
	for _, c := range rc.conns {
		d, _ := observe.SocketDrops(c)
		n += int(d)
	}
	return n
}

// account waits until every one of sent queries is accounted for: it got
// a reply or the proxy counted a drop with a reason (or, never the
// proxy's doing, the client's own socket dropped the reply). It fails
// when that does not happen within patience, far more than the
// Resolver's window (the client's timeout, 5s): a query not accounted by
// then never will be.
func (rc *replyCounter) account(t testing.TB, reg *testRegistry, sent int, patience time.Duration) (replies, dropped int) {
	t.Helper()
	give := time.Now().Add(patience)
	for {
		rc.mu.Lock()
		replies = len(rc.got)
		dup := 0
		for _, n := range rc.got {
			dup += n - 1
		}
		rc.mu.Unlock()
		if dup > 0 {
			t.Fatalf("%d duplicate replies", dup)
		}
		dropped = 0
		for _, s := range reg.series(t, "meshdns_dns_dropped_total") {
			dropped += int(s.Value)
		}
		if replies+dropped+rc.clientDrops() >= sent {
			return replies, dropped
		}
		if time.Now().After(give) {
			t.Fatalf("%d queries sent, %d replies, %d counted drops, %d replies dropped by the clients' sockets: %d queries lost without a trace",
				sent, replies, dropped, rc.clientDrops(), sent-replies-dropped-rc.clientDrops())
		}
		time.Sleep(10 * time.Millisecond) // the replies' pace, not a deadline
	}
}

// TestEveryQueryAccounted: with an upstream that truncates over UDP and
// fails the TCP retry, every query gets a reply (SERVFAIL, the upstream
// being of no use) or is counted as dropped with a reason, also when the
// UDP reader falls behind and the kernel drops what its socket's queue
// cannot hold. Before, those queries vanished: no reply and no count.
func TestEveryQueryAccounted(t *testing.T) {
	for _, mode := range []string{"close", "length", "partial"} {
		t.Run(mode, func(t *testing.T) {
			r, err := upstream.New(upstream.Config{Upstreams: []string{truncatingUpstream(t, mode)}, Registry: newTestRegistry()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = r.Close() })
			res := &stallingResolver{Resolver: r, name: wire(t, stallName), stalled: make(chan struct{}), release: make(chan struct{})}
			cfg := testConfig(res)
			cfg.UDPSockets = 1
			reg := newTestRegistry()
			cfg.Registry = reg
			s := startServer(t, cfg)
			s.SetTable(demoTable(t))
			// A queue of a few dozen datagrams, so the
			// burst below overflows it whatever the system's default.
			if err := s.udp[0].SetReadBuffer(32 << 10); err != nil {
				t.Fatal(err)
			}
			rc := newReplyCounter(t, udpAddr(s), 4)

			rc.send(t, 0, stallName)
			<-res.stalled
			const burst = 400
			for i := range burst {
				// 100 names: some questions share a flight.
				rc.send(t, uint16(1+i), fmt.Sprintf("n%d.example.org.", i%100))
			}
			close(res.release)
			replies, dropped := rc.account(t, reg, 1+burst, 30*time.Second)
			if dropped == 0 {
				t.Fatalf("%d replies and no drop: the queue did not overflow, the test tested nothing", replies)
			}
			if got := reg.value(t, "meshdns_dns_dropped_total", "udp", "queue_full"); int(got) != dropped {
				t.Errorf("drops %d, of which queue_full %v: want them all queue_full", dropped, got)
			}
			rc.mu.Lock()
			defer rc.mu.Unlock()
			if rc.rcode[dns.RcodeServerFailure] != replies {
				t.Errorf("replies by rcode %v, want all %d SERVFAIL", rc.rcode, replies)
			}
			t.Logf("%d queries: %d SERVFAIL, %d dropped by a full queue, counted", 1+burst, replies, dropped)
		})
	}
}

// TestEveryQueryAccountedUnderLoad is the load that found the loss: 2,000
// queries a second for two seconds, against an upstream that truncates
// and closes the TCP retry, from real UDP clients, all to one socket.
// Whatever the machine's load does to the reader, every query gets a
// reply or a counted drop.
func TestEveryQueryAccountedUnderLoad(t *testing.T) {
	r, err := upstream.New(upstream.Config{Upstreams: []string{truncatingUpstream(t, "close")}, Registry: newTestRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	cfg := testConfig(r)
	cfg.UDPSockets = 1
	reg := newTestRegistry()
	cfg.Registry = reg
	s := startServer(t, cfg)
	s.SetTable(demoTable(t))
	rc := newReplyCounter(t, udpAddr(s), 4)

	const rate, total = 2000, 4000
	start := time.Now()
	for i := range total {
		// Paced by the clock: a schedule, not a wait for an outcome.
		for time.Since(start) < time.Duration(i)*time.Second/rate {
			time.Sleep(200 * time.Microsecond)
		}
		rc.send(t, uint16(i), fmt.Sprintf("n%d.example.org.", i))
	}
	replies, dropped := rc.account(t, reg, total, 30*time.Second)
	t.Logf("%d queries in %v: %d replies %v, %d counted drops, %d replies dropped by the clients' sockets",
		total, time.Since(start).Round(time.Millisecond), replies, rc.rcode, dropped, rc.clientDrops())
}
