package upstream

import (
	"encoding/binary"
	"testing"
	"time"

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
		m, err := unpackReply(b)
		if err != nil {
			return
		}
		now := time.Unix(1e9, 0).UnixNano()
		e, cacheable, err := r.makeEntry(m, key, nameLen, now)
		if err != nil {
			return
		}
		out := e.AppendTo(nil, client, e.TTL)
		checkFuzzReply(t, out, client, m.Rcode&0xF)
		if !cacheable {
			return
		}
		r.cache.Set(string(key), e)
		hit, ttl, st := r.cache.Get(key, now+int64(time.Second))
		if st != cache.Fresh && e.TTL > 1 {
			t.Fatalf("stored entry with TTL %d not fresh a second later", e.TTL)
		}
		if st == cache.Fresh {
			checkFuzzReply(t, hit.AppendTo(nil, client, ttl), client, m.Rcode&0xF)
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
