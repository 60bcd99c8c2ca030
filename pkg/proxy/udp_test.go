package proxy

import (
	"log/slog"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// The UDP readers over real sockets of each address family: a table
// answer and a forwarded one (sent by a worker to the address the reader
// read) reach the client, the Tap sees the client's address as the
// socket does (an IPv4 client of a dual-stack socket as a mapped
// address), and a burst of more queries than one wake-up answers is
// answered whole.
func TestUDPReaders(t *testing.T) {
	for _, tc := range []struct {
		name, listen, dial string
		mapped             bool
	}{
		{name: "ipv4", listen: "127.0.0.1:0", dial: "127.0.0.1"},
		{name: "ipv6", listen: "[::1]:0", dial: "::1"},
		{name: "dual-stack from ipv4", listen: "[::]:0", dial: "127.0.0.1", mapped: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if c, err := net.ListenPacket("udp", tc.listen); err != nil {
				t.Skipf("no %s here: %v", tc.listen, err)
			} else {
				c.Close()
			}
			tap := &recordingTap{}
			cfg := testConfig(&fakeResolver{answer: staticAnswer(t, "A 192.0.2.1")})
			cfg.Addrs = []string{tc.listen}
			cfg.UDPSockets = 1
			cfg.QueryLog = QueryLogConfig{Classes: LogAll}
			cfg.QueryTap = tap
			cfg.QueryLogger = slog.New(slog.DiscardHandler)
			s := startServer(t, cfg)
			s.SetTable(demoTable(t))
			port := s.UDPAddrs()[0].(*net.UDPAddr).Port
			c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(netip.MustParseAddr(tc.dial), uint16(port))))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()

			names := []string{"web.demo.svc.cluster.local.", "www.example.org."} // table, forwarded
			// Waves of 96 queries: more than one wake-up of a reader
			// answers (udpBurst, 64), few enough that neither socket's
			// default receive buffer (about 160 small datagrams) drops one.
			const wave, waves = 96, 2
			buf := make([]byte, 4096)
			for w := range waves {
				for i := range wave {
					q := newQuery(names[i%2], dns.TypeA)
					q.Id = uint16(w*wave + i)
					pkt, err := q.Pack()
					if err != nil {
						t.Fatal(err)
					}
					if _, err := c.Write(pkt); err != nil {
						t.Fatal(err)
					}
				}
				got := make(map[uint16]bool)
				for len(got) < wave {
					// Each reply is on its way: the deadline only ends a
					// test that would otherwise hang.
					_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
					m, err := c.Read(buf)
					if err != nil {
						t.Fatalf("wave %d: %d of %d replies: %v", w, len(got), wave, err)
					}
					var r dns.Msg
					if err := r.Unpack(buf[:m]); err != nil || r.Rcode != dns.RcodeSuccess || len(r.Answer) == 0 {
						t.Fatalf("reply %v: %v", &r, err)
					}
					if want := names[r.Id%2]; r.Question[0].Name != want {
						t.Fatalf("reply %d for %s, want %s", r.Id, r.Question[0].Name, want)
					}
					got[r.Id] = true
				}
			}
			const n = wave * waves

			client := netip.MustParseAddrPort(c.LocalAddr().String())
			if tc.mapped {
				client = netip.AddrPortFrom(netip.AddrFrom16(client.Addr().As16()), client.Port())
			}
			answers := tap.answers()
			if len(answers) != n {
				t.Fatalf("tap got %d answers, want %d", len(answers), n)
			}
			for _, a := range answers {
				if a.Client != client || a.Protocol != UDP {
					t.Fatalf("tap: client %v protocol %v, want %v udp", a.Client, a.Protocol, client)
				}
			}
		})
	}
}
