package upstream

import (
	"encoding/binary"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/pkg/proxy/upstream/cache"
)

// FuzzUpstreamReply feeds arbitrary bytes to the path an upstream datagram
// takes: match against the query, unpack, repack into a cache entry, build
// the client's reply from it, store and hit it. Whatever the bytes, nothing
// may panic, and every reply built must unpack with the client's question
// and no OPT.
func FuzzUpstreamReply(f *testing.F) {
	const id = 0x1234
	r, err := New(Config{Upstreams: []string{"127.0.0.1:53"}, CacheSize: 16})
	if err != nil {
		f.Fatal(err)
	}
	defer r.Close()
	client := qwire(f, "ExAmple.COM.", dns.TypeA)
	var kb [maxQuestion]byte
	nameLen, err := lowerQuestion(&kb, client)
	if err != nil {
		f.Fatal(err)
	}
	key := kb[:len(client)]

	pack := func(mutate func(m *dns.Msg)) []byte {
		m := new(dns.Msg)
		m.SetQuestion("example.com.", dns.TypeA)
		m.Id, m.Response, m.Compress = id, true, true
		mutate(m)
		b, err := m.Pack()
		if err != nil {
			f.Fatal(err)
		}
		return b
	}
	rr := func(s string) dns.RR { return mustRR(f, s) }
	// Seed: a plain answer.
	f.Add(pack(func(m *dns.Msg) { m.Answer = []dns.RR{rr("example.com. 60 IN A 192.0.2.1")} }))
	// Seed: CNAME chain with compression and an OPT to strip.
	f.Add(pack(func(m *dns.Msg) {
		m.Answer = []dns.RR{rr("example.com. 60 IN CNAME www.example.com."), rr("www.example.com. 30 IN A 192.0.2.1")}
		m.SetEdns0(1232, false)
	}))
	// Seed: NXDOMAIN with SOA (negative cache path).
	f.Add(pack(func(m *dns.Msg) {
		m.Rcode = dns.RcodeNameError
		m.Ns = []dns.RR{rr("com. 900 IN SOA a.gtld-servers.net. nstld.verisign-grs.com. 1 1800 900 604800 86400")}
	}))
	// Seed: NODATA with an SOA and OPT, the wire path's negative entry.
	f.Add(pack(func(m *dns.Msg) {
		m.Ns = []dns.RR{rr("example.com. 900 IN SOA ns.example.com. host.example.com. 1 1800 900 604800 60")}
		m.SetEdns0(1232, false)
	}))
	// Seed: OPT with an extended rcode (BADVERS), never cached.
	f.Add(pack(func(m *dns.Msg) {
		m.SetEdns0(1232, false)
		m.Rcode = dns.RcodeBadVers // packed as 0 in the header, 1 in OPT
	}))
	// Seed: OPT before another additional record: left to miekg.
	f.Add(pack(func(m *dns.Msg) {
		m.Answer = []dns.RR{rr("example.com. 60 IN NS ns.example.com.")}
		m.SetEdns0(1232, false)
		m.Extra = append(m.Extra, rr("ns.example.com. 60 IN AAAA 2001:db8::1"))
	}))
	// Seed: a type the wire path leaves to miekg.
	f.Add(pack(func(m *dns.Msg) { m.Answer = []dns.RR{rr(`example.com. 60 IN TXT "v=spf1 -all"`)} }))
	// Seed: truncated.
	f.Add(pack(func(m *dns.Msg) { m.Truncated = true }))
	plain := pack(func(m *dns.Msg) { m.Answer = []dns.RR{rr("example.com. 60 IN A 192.0.2.1")} })
	qend := 12 + len(client)
	// Seed: the answer's owner is a pointer to itself (compression loop).
	loop := append([]byte(nil), plain...)
	binary.BigEndian.PutUint16(loop[qend:], 0xC000|uint16(qend))
	f.Add(loop)
	// Seed: a pointer past the end of the message.
	past := append([]byte(nil), plain...)
	binary.BigEndian.PutUint16(past[qend:], 0xC000|0x3FFF)
	f.Add(past)
	// Seed: an over-long owner name (300 bytes of 63-byte labels).
	long := append([]byte(nil), plain[:qend]...)
	for range 5 {
		long = append(long, 63)
		long = append(long, make([]byte, 63)...)
	}
	long = append(long, 0, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 192, 0, 2, 1)
	f.Add(long)
	// Seed: owners spelt out (no compression), as a miekg server
	// without Compress sends them: pointed at the question.
	f.Add(func() []byte {
		m := new(dns.Msg)
		m.SetQuestion("example.com.", dns.TypeA)
		m.Id, m.Response = id, true
		m.Answer = []dns.RR{rr("EXAMPLE.com. 60 IN CNAME www.example.com."), rr("www.example.com. 30 IN A 192.0.2.1")}
		m.Ns = []dns.RR{rr("example.com. 60 IN NS ns.www.example.com.")}
		b, err := m.Pack()
		if err != nil {
			f.Fatal(err)
		}
		return b
	}())
	// Seed: the answer's owner points into the header.
	hdr := append([]byte(nil), plain...)
	binary.BigEndian.PutUint16(hdr[qend:], 0xC000|4)
	f.Add(hdr)
	// Seed: header only.
	f.Add(plain[:12])

	f.Fuzz(func(t *testing.T, b []byte) {
		switch checkReply(b, id, key, nameLen) {
		case "":
		case kindTruncated:
			return
		default:
			return
		}
		// makeEntry rewrites the reply's header in place: the input
		// stays as the fuzzer gave it.
		m, err := acceptReply(slices.Clone(b), nil, key, nameLen)
		if err != nil {
			return
		}
		now := time.Unix(1e9, 0).UnixNano()
		e, cacheable, err := r.makeEntry(m, key, nameLen, now)
		if m.msg == nil {
			checkWireEntry(t, r, b, key, nameLen, e, cacheable, err)
		}
		if err != nil {
			return
		}
		out := e.AppendTo(nil, client, e.TTL)
		checkFuzzReply(t, out, client, m.rcode&0xF)
		if !cacheable {
			return
		}
		r.cache.Set(string(key), e)
		hit, ttl, st := r.cache.Get(key, now+int64(time.Second))
		if st != cache.Fresh && e.TTL > 1 {
			t.Fatalf("stored entry with TTL %d not fresh a second later", e.TTL)
		}
		if st == cache.Fresh {
			checkFuzzReply(t, hit.AppendTo(nil, client, ttl), client, m.rcode&0xF)
		}
	})
}

func checkFuzzReply(t *testing.T, out, client []byte, rcode int) {
	t.Helper()
	if string(out[12:12+len(client)]) != string(client) {
		t.Fatalf("question %q, want %q", out[12:12+len(client)], client)
	}
	got := new(dns.Msg)
	if err := got.Unpack(out); err != nil {
		t.Fatalf("reply built from an accepted upstream reply does not unpack: %v", err)
	}
	if got.IsEdns0() != nil {
		t.Fatal("reply carries OPT")
	}
	if got.Rcode != rcode {
		t.Fatalf("rcode %d, want %d", got.Rcode, rcode)
	}
}

// checkWireEntry holds a reply scanReply took (orig, as it came) to what
// it was before the wire path: miekg must unpack it, and its repacked
// entry must give the same records, TTL and caching as the wire entry e.
func checkWireEntry(t *testing.T, r *Resolver, orig, key []byte, nameLen int, e *cache.Entry, cacheable bool, err error) {
	t.Helper()
	m := new(dns.Msg)
	if uerr := m.Unpack(orig); uerr != nil {
		t.Fatalf("scanReply took a reply miekg does not unpack: %v", uerr)
	}
	want, wantCacheable, wantErr := r.repackEntry(m, key, nameLen, time.Unix(1e9, 0).UnixNano())
	if (err != nil) != (wantErr != nil) {
		t.Fatalf("wire entry error %v, repacked entry error %v", err, wantErr)
	}
	if err != nil {
		return
	}
	if e.TTL != want.TTL || cacheable != wantCacheable || e.Negative != want.Negative || e.Flags != want.Flags {
		t.Fatalf("wire entry TTL %d cacheable %v negative %v flags %#x, repacked %d %v %v %#x",
			e.TTL, cacheable, e.Negative, e.Flags, want.TTL, wantCacheable, want.Negative, want.Flags)
	}
	got, wantMsg := new(dns.Msg), new(dns.Msg)
	if err := got.Unpack(e.AppendTo(nil, key, e.TTL)); err != nil {
		t.Fatalf("wire entry does not unpack: %v", err)
	}
	if err := wantMsg.Unpack(want.AppendTo(nil, key, want.TTL)); err != nil {
		t.Fatalf("repacked entry does not unpack: %v", err)
	}
	// Names compare in any case: an owner spelt as the question takes
	// the client's spelling on either path, where miekg's compression
	// matched it.
	if diff := cmp.Diff(strings.ToLower(wantMsg.String()), strings.ToLower(got.String())); diff != "" {
		t.Fatalf("wire entry differs from the repacked one (-repacked +wire):\n%s", diff)
	}
}
