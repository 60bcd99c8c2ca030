// Package cache holds forwarded DNS replies in packed form so that a hit is a
// copy plus TTL patching, with no allocation (cache hits allocate nothing
// per query).
//
// The cache is sharded by a hash of the key, each shard a map under a
// read-write lock. A full shard evicts the entry that expires first among a
// few sampled ones: cheaper than LRU bookkeeping on every hit (which would
// need a write lock), and it sheds expired and short-lived entries first.
package cache

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"
)

// State is what Get found.
type State uint8

const (
	// Miss: no usable entry.
	Miss State = iota
	// Fresh: the entry's TTL has not run out.
	Fresh
	// Stale: expired, but within the stale window (RFC 8767); usable only
	// when every upstream fails.
	Stale
)

// evictionSamples is how many entries a full shard looks at to pick a victim.
const evictionSamples = 4

// Cache maps lowercased question wire bytes (name + type + class) to Entries.
type Cache struct {
	shards []shard
	mask   uint64
	seed   maphash.Seed
	// stale is how long after expiry an entry may still be served stale,
	// in nanoseconds; entries older than that are treated as absent.
	stale     int64
	count     atomic.Int64
	evictions atomic.Uint64
}

type shard struct {
	mu  sync.RWMutex // guards following
	m   map[string]*Entry
	max int
}

// New returns a cache holding at most size entries (size > 0). staleWindow
// bounds how long after expiry an entry can still be returned as Stale.
func New(size int, staleWindow time.Duration) *Cache {
	if size < 1 {
		size = 1
	}
	// Shards of at least 128 entries keep the sampled eviction meaningful
	// and small caches exact; 64 shards are plenty for two to a few cores.
	n := 1
	for n < 64 && size/(n*2) >= 128 {
		n *= 2
	}
	c := &Cache{shards: make([]shard, n), mask: uint64(n - 1), seed: maphash.MakeSeed(), stale: int64(staleWindow)}
	for i := range c.shards {
		limit := size / n
		if i < size%n {
			limit++
		}
		c.shards[i] = shard{m: make(map[string]*Entry), max: limit}
	}
	return c
}

// shard picks key's shard with the runtime's AES-based hash (maphash): a
// byte-at-a-time FNV was the largest item in a cache-hit profile.
func (c *Cache) shard(key []byte) *shard {
	if c.mask == 0 {
		return &c.shards[0]
	}
	return &c.shards[maphash.Bytes(c.seed, key)&c.mask]
}

// Get looks key up at time now (unix nanoseconds). For a Fresh entry ttl is
// the TTL left; for Stale and Miss it is zero. Get allocates nothing.
func (c *Cache) Get(key []byte, now int64) (e *Entry, ttl uint32, st State) {
	s := c.shard(key)
	s.mu.RLock()
	e = s.m[string(key)]
	s.mu.RUnlock()
	if e == nil {
		return nil, 0, Miss
	}
	if ttl, ok := e.Remaining(now); ok {
		return e, ttl, Fresh
	}
	if e.Expired(now) <= c.stale {
		return e, 0, Stale
	}
	return nil, 0, Miss
}

// Set stores e under key, replacing any entry there. It reports whether
// another entry was evicted to make room.
func (c *Cache) Set(key string, e *Entry) (evicted bool) {
	s := c.shard([]byte(key))
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.m[key]; ok {
		s.m[key] = e
		return false
	}
	if len(s.m) >= s.max {
		s.evictLocked()
		evicted = true
		c.evictions.Add(1)
		c.count.Add(-1)
	}
	s.m[key] = e
	c.count.Add(1)
	return evicted
}

// evictLocked drops the entry expiring first among a few picked at random
// (map iteration order is randomised by the runtime).
func (s *shard) evictLocked() {
	var (
		victim string
		at     int64
		i      int
	)
	for k, e := range s.m {
		exp := e.Stored + int64(e.TTL)*1e9
		if i == 0 || exp < at {
			victim, at = k, exp
		}
		if i++; i == evictionSamples {
			break
		}
	}
	delete(s.m, victim)
}

// Len returns the number of entries held.
func (c *Cache) Len() int { return int(c.count.Load()) }

// Evictions returns how many entries were evicted to make room so far.
func (c *Cache) Evictions() uint64 { return c.evictions.Load() }

// DeleteFunc drops every entry whose key del reports true for, and returns
// how many it dropped. It holds each shard's write lock in turn: for rare
// changes (forwarding rules), not for the query path.
func (c *Cache) DeleteFunc(del func(key string) bool) int {
	n := 0
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		for k := range s.m {
			if del(k) {
				delete(s.m, k)
				n++
			}
		}
		s.mu.Unlock()
	}
	c.count.Add(int64(-n))
	return n
}
