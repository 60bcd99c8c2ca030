package main

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/internal/metrics"
	"github.com/meshdns/meshdns/internal/proxymetrics"
	"github.com/meshdns/meshdns/pkg/nametable"
	"github.com/meshdns/meshdns/pkg/proxy"
	"github.com/meshdns/meshdns/pkg/proxy/upstream"
)

// The three server processes the runner starts. Each prints "ready <addr>"
// on stdout once it serves and runs until killed.

// runReflector is the baseline: the least a Go UDP server can do per
// query. It reads a packet and writes back one precomputed answer with the
// query's ID patched in, with the same socket calls the proxy uses.
func runReflector(args []string) error {
	fs := flag.NewFlagSet("reflector", flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:0", "UDP address")
	_ = fs.Parse(args)
	m := new(dns.Msg)
	m.SetQuestion("svc1.ns1.svc.cluster.local.", dns.TypeA)
	m.Response, m.Authoritative, m.RecursionAvailable = true, true, true
	m.Answer = []dns.RR{&dns.A{
		Hdr: dns.RR_Header{Name: "svc1.ns1.svc.cluster.local.", Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 30},
		A:   net.IPv4(10, 0, 0, 1),
	}}
	m.Compress = true
	answer, err := m.Pack()
	if err != nil {
		return err
	}
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort(*addr)))
	if err != nil {
		return err
	}
	fmt.Printf("ready %s\n", c.LocalAddr())
	buf := make([]byte, 65535)
	out := make([]byte, len(answer))
	copy(out, answer)
	for {
		n, from, err := c.ReadFromUDPAddrPort(buf)
		if err != nil {
			return err
		}
		if n < 2 {
			continue
		}
		binary.BigEndian.PutUint16(out, binary.BigEndian.Uint16(buf))
		_, _ = c.WriteToUDPAddrPort(out, from)
	}
}

// runUpstream is the upstream of every server measured: it answers every
// A question with one address, TTL 1 hour, except a name whose first label
// starts with "fwd" (forwardedPrefix), answered with TTL 0 so that no cache
// keeps it and every query for it is forwarded; any other type gets NOERROR
// without records. It answers from one goroutine with the net package and
// no DNS library, a few microseconds per query, so that a forwarded query's
// latency is the forwarder's, not the upstream's.
func runUpstream(args []string) error {
	fs := flag.NewFlagSet("upstream", flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:0", "UDP address")
	_ = fs.Parse(args)
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort(*addr)))
	if err != nil {
		return err
	}
	fmt.Printf("ready %s\n", c.LocalAddr())
	buf := make([]byte, 65535)
	out := make([]byte, 0, 512)
	for {
		n, from, err := c.ReadFromUDPAddrPort(buf)
		if err != nil {
			return err
		}
		if reply := upstreamReply(out[:0], buf[:n]); reply != nil {
			_, _ = c.WriteToUDPAddrPort(reply, from)
		}
	}
}

// forwardedPrefix starts the first label of the names the upstream answers
// with TTL 0: the forwarded misses of the mixed scenario.
const forwardedPrefix = "fwd"

// upstreamReply appends to dst runUpstream's reply to the query q, or
// returns nil for a packet that is not one question.
func upstreamReply(dst, q []byte) []byte {
	if len(q) < 12 || q[2]&0x80 != 0 || binary.BigEndian.Uint16(q[4:]) != 1 {
		return nil
	}
	end := 12
	for end < len(q) && q[end] != 0 {
		if q[end]&0xC0 != 0 {
			return nil // a question is never compressed
		}
		end += 1 + int(q[end])
	}
	end += 5 // the root label, type and class
	if end > len(q) {
		return nil
	}
	qtype := binary.BigEndian.Uint16(q[end-4:])
	var ancount byte
	if qtype == dns.TypeA {
		ancount = 1
	}
	// QR, the query's opcode and RD, RA; one question, the answer.
	dst = append(dst, q[0], q[1], 0x80|q[2]&0x79, 0x80, 0, 1, 0, ancount, 0, 0, 0, 0)
	dst = append(dst, q[12:end]...)
	if ancount == 0 {
		return dst
	}
	ttl := uint32(3600)
	if label := q[13:min(13+int(q[12]), end)]; len(label) >= len(forwardedPrefix) &&
		strings.EqualFold(string(label[:len(forwardedPrefix)]), forwardedPrefix) {
		ttl = 0
	}
	dst = append(dst, 0xC0, 12, 0, 1, 0, 1) // the question's name, A, IN
	dst = binary.BigEndian.AppendUint32(dst, ttl)
	return append(dst, 0, 4, 192, 0, 2, 1)
}

// benchEntries are n Kubernetes services svc<i>.ns<i%namespaces>, one IPv4
// address each, with one named port.
func benchEntries(n int) []nametable.Entry {
	out := make([]nametable.Entry, 0, n)
	for i := range n {
		ns := fmt.Sprintf("ns%d", i%namespaces)
		name := fmt.Sprintf("svc%d", i)
		out = append(out, nametable.Entry{
			Hostname:  name + "." + ns + ".svc.cluster.local",
			IPs:       []netip.Addr{netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})},
			Registry:  "Kubernetes",
			ShortName: name,
			Namespace: ns,
			Ports:     []nametable.Port{{Name: "http", Port: 80, Protocol: "TCP"}},
		})
	}
	return out
}

const (
	namespaces   = 100
	podNamespace = "ns0"
)

// runServe runs the proxy the way the agent does: a nametable of n
// services for a pod in ns0, the real upstream Resolver with its cache.
func runServe(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:0", "DNS address (udp+tcp)")
	services := fs.Int("services", 10000, "services in the table")
	up := fs.String("upstream", "", "upstream host:port")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile here until killed with SIGTERM")
	rules := fs.Int("policy-rules", 0, "enforce a DNS policy of this many rules (0: none; see policy.go)")
	cacheSize := fs.Int("cache-size", 0, "the Resolver's cache size (0: its default, negative: no cache)")
	failingTopN := fs.Int("failing-top-n", 0, "count failing answers in a failing-names summary of this many names (0: none; see failing.go)")
	_ = fs.Parse(args)
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	reg := metrics.NewRegistry()
	res, err := upstream.New(upstream.Config{Upstreams: []string{*up}, Timeout: time.Second, Logger: log, Registry: proxymetrics.Registry(reg), CacheSize: *cacheSize})
	if err != nil {
		return err
	}
	defer res.Close()
	tbl, err := nametable.New(benchEntries(*services), []string{"cluster.local"}, nametable.Context{
		Namespace: podNamespace,
		Search:    []string{podNamespace + ".svc.cluster.local", "svc.cluster.local", "cluster.local"},
	})
	if err != nil {
		return err
	}
	search := []string{podNamespace + ".svc.cluster.local", "svc.cluster.local", "cluster.local"}
	s, err := proxy.New(proxy.Config{Addrs: []string{*addr}, Resolver: res, Logger: log, Registry: proxymetrics.Registry(reg), Search: search})
	if err != nil {
		return err
	}
	pol, err := benchPolicy(*rules)
	if err != nil {
		return err
	}
	s.SetTablePolicy(tbl, pol)
	if *failingTopN > 0 {
		s.SetFailingNames(proxy.NewFailingNames(*failingTopN))
	}
	// Building the table leaves about as much garbage as the table itself;
	// hand it back to the OS now rather than when the scavenger gets to it,
	// as the agent does after a swap.
	debug.FreeOSMemory()
	if err := s.Listen(); err != nil {
		return err
	}
	fmt.Printf("ready %s\n", s.UDPAddrs()[0])
	return s.Run(ctx)
}
