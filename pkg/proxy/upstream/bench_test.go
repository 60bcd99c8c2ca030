package upstream

import (
	"context"
	"fmt"
	"testing"

	"github.com/miekg/dns"
)

// BenchmarkAppendReplyCacheHit is the hot path for forwarded names: it must
// report 0 allocs/op.
func BenchmarkAppendReplyCacheHit(b *testing.B) {
	srv := newServer(b, answerWith(b, 0, []string{"$QNAME 300 IN A 192.0.2.1", "$QNAME 300 IN A 192.0.2.2"}, nil))
	r, _ := newTestResolver(b, Config{Upstreams: []string{srv.Addr}})
	q := qwire(b, "www.Example.com.", dns.TypeA)
	ctx := context.Background()
	if _, _, err := r.AppendReply(ctx, nil, q); err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 0, 512)
	b.ReportAllocs()
	for b.Loop() {
		if _, src, err := r.AppendReply(ctx, buf[:0], q); err != nil || src != SourceCache {
			b.Fatalf("src %v err %v", src, err)
		}
	}
}

// BenchmarkAppendReplyMiss measures a full upstream round trip over loopback
// UDP (new socket, query, validation, repack) with the cache off.
func BenchmarkAppendReplyMiss(b *testing.B) {
	srv := newServer(b, answerWith(b, 0, []string{"$QNAME 300 IN A 192.0.2.1"}, nil))
	r, _ := newTestResolver(b, Config{Upstreams: []string{srv.Addr}, CacheSize: -1})
	q := qwire(b, "www.example.com.", dns.TypeA)
	ctx := context.Background()
	buf := make([]byte, 0, 512)
	b.ReportAllocs()
	for b.Loop() {
		if _, src, err := r.AppendReply(ctx, buf[:0], q); err != nil || src != SourceUpstream {
			b.Fatalf("src %v err %v", src, err)
		}
	}
}

// BenchmarkAppendReplyMissQuiet is BenchmarkAppendReplyMiss against
// quietUpstream (TTL 0, the cache on), which allocates nothing: what it
// reports is the agent's own (TestForwardedMissAllocs pins it), its time
// has no miekg server in it.
func BenchmarkAppendReplyMissQuiet(b *testing.B) {
	r, _ := newTestResolver(b, Config{Upstreams: []string{quietUpstream(b, false)}})
	q := qwire(b, "fwd.example.", dns.TypeA)
	ctx := context.Background()
	buf := make([]byte, 0, 512)
	b.ReportAllocs()
	for b.Loop() {
		if _, src, err := r.AppendReply(ctx, buf[:0], q); err != nil || src != SourceUpstream {
			b.Fatalf("src %v err %v", src, err)
		}
	}
}

// BenchmarkAppendReplyCacheHitParallel hits 1000 cached names from every
// core at once: shards keep the readers off one lock.
func BenchmarkAppendReplyCacheHitParallel(b *testing.B) {
	srv := newServer(b, answerWith(b, 0, []string{"$QNAME 300 IN A 192.0.2.1"}, nil))
	r, _ := newTestResolver(b, Config{Upstreams: []string{srv.Addr}})
	ctx := context.Background()
	qs := make([][]byte, 1000)
	for i := range qs {
		qs[i] = qwire(b, fmt.Sprintf("host%d.example.com.", i), dns.TypeA)
		if _, _, err := r.AppendReply(ctx, nil, qs[i]); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		buf := make([]byte, 0, 512)
		i := 0
		for pb.Next() {
			if _, src, err := r.AppendReply(ctx, buf[:0], qs[i%len(qs)]); err != nil || src != SourceCache {
				b.Errorf("src %v err %v", src, err)
				return
			}
			i++
		}
	})
}
