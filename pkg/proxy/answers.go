package proxy

import (
	"encoding/binary"
	"hash/maphash"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/internal/dnswire"
	"github.com/meshdns/meshdns/pkg/nametable"
)

// answerKind says how a question the table has seen is served.
type answerKind uint8

const (
	// kindPacked: a precomputed reply, copied and patched per query.
	kindPacked answerKind = iota
	// kindForward: the table does not own the name; ask the Resolver.
	kindForward
	// kindChase: an ExternalName whose target is outside the table: the
	// CNAMEs plus the target's records resolved upstream.
	kindChase
	// kindMiss: not in the answer cache (never stored).
	kindMiss
)

// answer is what the table said about one (name, type, class), kept so the
// next query for it costs a map lookup and a copy instead of a Lookup and a
// Pack. Immutable once stored.
type answer struct {
	// msg is the packed reply (kindPacked): ID 0, QR AA RA set, the
	// question in lowercase at offset 12, owners compressed to it so a copy
	// with the client's question bytes echoes the client's spelling.
	msg []byte
	// res is the Lookup result (kindChase only).
	res *nametable.Result
	// A run of equal-length A or AAAA records in msg that the server rotates
	// per query: offset of the first, length of each, count (only the
	// pod zone's records, when the run starts with them).
	shufOff, shufLen, shufN int
	// rcode of msg, for metrics.
	rcode int
	kind  answerKind
}

// answerShards spreads the answer cache over several maps so readers on
// different cores rarely share a lock word.
const answerShards = 16

// Bounds of a table's answer cache in bytes (Config.MaxAnswerBytes): the
// budget is answerBytesPerName per name of the table, at least
// minAnswerBytes, at most MaxAnswerBytes. A pod asks a name as itself and
// through the three search domains of its resolv.conf, A and AAAA: eight
// answers of up to about 250 bytes each. The cache holds that working set
// for tables up to 2,000 names and 4 MiB of it beyond; an answer it keeps
// costs a map lookup and a copy, one it does not a Lookup and a packing,
// three to four times as much. Only questions asked twice are kept
// (tableState.admit), so the cache grows with what a pod asks again, not
// with the table: a pod asking every name once keeps nothing.
const (
	answerBytesPerName = 2 << 10
	minAnswerBytes     = 128 << 10
	// answerOverhead is what an entry costs besides its key and reply
	// bytes: its answer in the slab and its map slot.
	answerOverhead = int(unsafe.Sizeof(answer{})) + 40
	// answerChunk is the size of the byte chunks keys and replies are
	// copied into, and answerSlab the answers per slab.
	answerChunk = 8 << 10
	answerSlab  = 64
	// seenBits is the size of the admission filter (16 KiB per table),
	// cleared once seenBits/seenClear are set: by then a question asked
	// once finds its bit taken by another (and is kept) one time in 16 at
	// most, 6% on average, and 16,384 questions fit in one clearing.
	seenBits  = 1 << 17
	seenClear = 8
)

// tableState is one table with its answer cache. A new table gets a new
// state, so cached answers never outlive the table they came from.
type tableState struct {
	table Lookuper // or nil before the first table
	pol   *Policy  // enforced with table, or nil (policy.go)
	// zoneAllowed: pol allows every table name inside the cluster
	// domain without a decision (Handler.zoneAllowed).
	zoneAllowed bool
	// ownsCluster: pol is set and table is complete for the cluster
	// domain (Handler.ownsCluster).
	ownsCluster bool
	// perShard bounds each shard's entries and shardBytes its bytes.
	perShard, shardBytes int
	seed                 maphash.Seed
	shards               [answerShards]answerShard
	// seen has a bit set for each question (by hash) answered but not
	// kept since the filter was last cleared, and seenN counts the bits
	// set; see admit.
	seen  [seenBits / 64]atomic.Uint64
	seenN atomic.Int64
}

// answerShard is one part of the cache. Keys, replies and answers are cut
// from chunks and slabs the shard owns: cached one by one among the
// garbage of packing them, they pinned spans of the heap long after that
// garbage was freed (18 MB of a 100,000-name agent's heap after every
// name was asked once). A full shard starts a new generation instead of
// evicting entries one by one: the map is cleared and the chunks and
// slabs are filled again from the first. Dropping them instead made each
// first answer garbage (about 250 bytes a name), and a pod asking 100,000
// names for the first time grew its heap by the collector's whole GOGC
// headroom, 1.5 times its steady RSS.
//
// Reusing the memory is safe because nothing outside the shard keeps a
// pointer into it: readers copy the reply out (appendCached) under the
// read lock, and a new generation starts under the write lock.
type answerShard struct {
	mu sync.RWMutex
	// m is keyed by lowercased wire name + type + class; its keys and
	// answers point into chunks and slabs. Guarded by mu, as are the
	// following.
	m map[string]*answer
	// chunks keys and replies are copied into, and slabs answers are cut
	// from, filled in order; chunk and slab index the ones being filled.
	chunks      [][]byte
	slabs       [][]answer
	chunk, slab int
	used        int // bytes this generation holds (estimate, see answerOverhead)
}

func newTableState(t Lookuper, maxAnswers, maxBytes int) *tableState {
	budget := maxBytes
	if l, ok := t.(interface{ Len() int }); ok {
		budget = min(maxBytes, max(minAnswerBytes, l.Len()*answerBytesPerName))
	}
	s := &tableState{
		table:      t,
		perShard:   max(1, maxAnswers/answerShards),
		shardBytes: max(1, budget/answerShards),
		seed:       maphash.MakeSeed(),
	}
	for i := range s.shards {
		s.shards[i].m = make(map[string]*answer)
	}
	return s
}

func (s *tableState) shard(key []byte) *answerShard {
	return &s.shards[maphash.Bytes(s.seed, key)%answerShards]
}

// admit reports whether the answer to key is worth keeping: it is when
// the question was asked before since the filter was cleared (a bit of
// seen, so now and then a first question is let in on another's bit). A
// question asked once is answered and forgotten; keeping it would grow
// the cache (and the pod's memory) with every name a client walks once,
// up to the budget. The filter is cleared once an eighth of its bits are
// set.
func (s *tableState) admit(key []byte) bool {
	bit := maphash.Bytes(s.seed, key) / answerShards % seenBits
	mask := uint64(1) << (bit % 64)
	if s.seen[bit/64].Or(mask)&mask != 0 {
		return true
	}
	if s.seenN.Add(1) >= seenBits/seenClear {
		s.seenN.Store(0)
		for i := range s.seen {
			s.seen[i].Store(0)
		}
	}
	return false
}

// appendCached looks key up and returns kindMiss when it is not cached,
// else its kind and what the handler needs of it: for a packed answer dst
// with the reply appended (its address run rotated) and its rcode, for a
// chase the Result. Nothing it hands out points into the
// shard, whose memory the next generation reuses once the lock is
// released. It does not allocate.
func (s *tableState) appendCached(dst, key []byte) (out []byte, kind answerKind, rcode int, chase *nametable.Result) {
	sh := s.shard(key)
	sh.mu.RLock()
	a := sh.m[string(key)]
	if a == nil {
		sh.mu.RUnlock()
		return dst, kindMiss, 0, nil
	}
	dst, chase = a.handOut(dst)
	kind, rcode = a.kind, a.rcode
	sh.mu.RUnlock()
	return dst, kind, rcode, chase
}

// handOut gives the handler what it needs of a, which it must not keep:
// a packed reply is appended to dst (its run of addresses rotated), a
// chased Result returned.
func (a *answer) handOut(dst []byte) ([]byte, *nametable.Result) {
	switch a.kind {
	case kindPacked:
		out := append(dst, a.msg...)
		if a.shufN > 1 {
			rotate(out[len(dst):], a)
		}
		return out, nil
	case kindChase:
		return dst, a.res
	}
	return dst, nil
}

// rotate turns the run of A/AAAA records in out by a random amount: the
// records have equal length, so this is a copy with no re-packing, and
// each address comes first equally often.
func rotate(out []byte, a *answer) {
	r := rand.IntN(a.shufN)
	if r == 0 {
		return
	}
	src := a.msg[a.shufOff : a.shufOff+a.shufN*a.shufLen]
	split := r * a.shufLen
	n := copy(out[a.shufOff:], src[split:])
	copy(out[a.shufOff+n:], src[:split])
}

// put stores a copy of a. When the shard is full (entries or bytes) a new
// generation starts. Forward markers never start one: a client walking
// random external names (random subdomains of a CDN) must not push out
// the table's answers, so once the shard is full such names pay a Lookup
// per query instead.
func (s *tableState) put(key []byte, a *answer) {
	need := len(key) + len(a.msg) + answerOverhead
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if len(sh.m) >= s.perShard || sh.used+need > s.shardBytes {
		if a.kind == kindForward {
			return
		}
		sh.resetLocked()
	}
	stored := sh.newAnswerLocked()
	*stored = *a
	k := sh.copyBytesLocked(key)
	if a.msg != nil {
		stored.msg = sh.copyBytesLocked(a.msg)
	}
	sh.m[unsafe.String(unsafe.SliceData(k), len(k))] = stored
	sh.used += need
}

// resetLocked starts a new generation in the memory of the last one.
func (sh *answerShard) resetLocked() {
	clear(sh.m) // keeps the map's buckets for the next generation
	for i := range sh.chunks {
		sh.chunks[i] = sh.chunks[i][:0]
	}
	for i := range sh.slabs {
		clear(sh.slabs[i]) // drops the chased Results they point to
		sh.slabs[i] = sh.slabs[i][:0]
	}
	sh.chunk, sh.slab, sh.used = 0, 0, 0
}

// newAnswerLocked returns the next free answer of the generation's slabs.
func (sh *answerShard) newAnswerLocked() *answer {
	if len(sh.slabs) == 0 || len(sh.slabs[sh.slab]) == answerSlab {
		if len(sh.slabs) > 0 {
			sh.slab++
		}
		if sh.slab == len(sh.slabs) {
			sh.slabs = append(sh.slabs, make([]answer, 0, answerSlab))
		}
	}
	s := append(sh.slabs[sh.slab], answer{})
	sh.slabs[sh.slab] = s
	return &s[len(s)-1]
}

// copyBytesLocked copies b into the generation's chunks (bytes once
// written there are not written again in that generation, so keys may be
// strings over them).
func (sh *answerShard) copyBytesLocked(b []byte) []byte {
	if len(sh.chunks) == 0 || cap(sh.chunks[sh.chunk])-len(sh.chunks[sh.chunk]) < len(b) {
		if len(sh.chunks) > 0 {
			sh.chunk++
		}
		size := max(answerChunk, len(b))
		switch {
		case sh.chunk == len(sh.chunks):
			sh.chunks = append(sh.chunks, make([]byte, 0, size))
		case cap(sh.chunks[sh.chunk]) < len(b):
			sh.chunks[sh.chunk] = make([]byte, 0, size) // a reply larger than a chunk
		}
	}
	c := sh.chunks[sh.chunk]
	lo := len(c)
	c = append(c, b...)
	sh.chunks[sh.chunk] = c
	return c[lo:len(c):len(c)]
}

// len returns the number of cached answers.
func (s *tableState) len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.RLock()
		n += len(sh.m)
		sh.mu.RUnlock()
	}
	return n
}

// build asks the table about the question, packs an authoritative reply
// once, stores the answer under key and returns it as appendCached does.
// It allocates nothing for the names the table holds (their question name
// is spelt in the packer's scratch), so a table answer costs about the
// same whether the cache kept it or not.
func (s *tableState) build(dst, key []byte, r *request) ([]byte, answerKind, int, *nametable.Result, error) {
	p := dnswire.GetPacker()
	defer p.Release()
	name, scratch := p.QuestionName(r.LName())
	if !scratch {
		name = wireName(r.LName())
	}
	a, err := buildAnswer(s.table, p, name, r.QType, r.QClass)
	if err == nil && a.kind == kindChase && scratch {
		// The kept Result may hold parts of the name (a wildcard's
		// alias): ask again with a name of its own.
		a, err = buildAnswer(s.table, p, strings.Clone(name), r.QType, r.QClass)
	}
	if err != nil {
		return dst, kindMiss, 0, nil, err
	}
	dst, chase := a.handOut(dst)
	if s.admit(key) {
		s.put(key, &a)
	}
	return dst, a.kind, a.rcode, chase, nil
}

// buildAnswer asks the table about the question (lowerName: lowercased,
// presentation form, trailing dot) and, for an authoritative answer,
// packs the reply into p's buffer (a.msg is valid until p is used again:
// put copies it).
func buildAnswer(t Lookuper, p *dnswire.Packer, lowerName string, qtype, qclass uint16) (answer, error) {
	res := t.Lookup(dns.Question{Name: lowerName, Qtype: qtype, Qclass: qclass})
	switch {
	case res.Action != nametable.Answer:
		return answer{kind: kindForward}, nil
	case res.Chase != "":
		chase := res // only this branch puts a Result on the heap
		return answer{kind: kindChase, res: &chase}, nil
	}
	// The packer's view of res, built here: a call taking the Result by
	// value cost a measurable share of a first answer.
	sec := dnswire.Sections{Rcode: res.Rcode, Alias: res.Alias, Answer: res.Answer, Chain: res.Chain, Ns: res.Ns, Extra: res.Extra}
	if res.Alias != "" {
		sec.AliasTTL = aliasTTL(res)
	}
	buf, ok := p.PackWire(&sec, lowerName, qtype, qclass)
	if !ok {
		var err error
		if buf, err = p.Pack(&sec, lowerName, qtype, qclass); err != nil {
			return answer{}, err
		}
	}
	a := answer{kind: kindPacked, msg: buf, rcode: res.Rcode}
	a.shufOff, a.shufLen, a.shufN = shuffleRun(buf)
	if res.Local > 0 && res.Local < a.shufN {
		// The run starts with the endpoints in the pod's zone: they
		// rotate among themselves, the others follow in their order
		// (pkg/nametable Result.Local).
		a.shufN = res.Local
	}
	return a, nil
}

// resultAnswer writes the answer section the Result contract describes
// (pkg/nametable Result): question CNAME Alias, then Answer owned by Alias
// or the question name. The records are copied because their owners are
// rewritten and the table's records are shared.
func resultAnswer(res nametable.Result, qname string) []dns.RR {
	owner := qname
	out := make([]dns.RR, 0, len(res.Answer)+1)
	if res.Alias != "" {
		owner = strings.ToLower(dns.Fqdn(res.Alias))
		out = append(out, dnswire.AliasCNAME(&dnswire.Sections{AliasTTL: aliasTTL(res)}, qname, owner))
	}
	for _, rr := range res.Answer {
		c := dns.Copy(rr)
		c.Header().Name = owner
		out = append(out, c)
	}
	return out
}

// sections is what of res the packer packs.
func sections(res nametable.Result) dnswire.Sections {
	s := dnswire.Sections{Rcode: res.Rcode, Alias: res.Alias, Answer: res.Answer, Chain: res.Chain, Ns: res.Ns, Extra: res.Extra}
	if res.Alias != "" {
		s.AliasTTL = aliasTTL(res)
	}
	return s
}

// aliasTTL picks the TTL of the synthesized CNAME: the table gives none, so
// it follows the records it points at (or the SOA of a NODATA answer), and
// the resolver caches both for the same time.
func aliasTTL(res nametable.Result) uint32 {
	for _, rrs := range [][]dns.RR{res.Answer, res.Ns} {
		if len(rrs) > 0 {
			return rrs[0].Header().Ttl
		}
	}
	return defaultAliasTTL
}

// defaultAliasTTL is the TTL of a CNAME with nothing after it, the
// Kubernetes DNS default TTL.
const defaultAliasTTL = 30

// shuffleRun finds the longest run of consecutive A (or AAAA) records in
// the answer section with the same owner bytes and the same length, so the
// server can rotate them in the wire copy without re-packing.
func shuffleRun(msg []byte) (off, size, n int) {
	if len(msg) < dnswire.HeaderLen {
		return 0, 0, 0
	}
	qd := int(binary.BigEndian.Uint16(msg[4:]))
	an := int(binary.BigEndian.Uint16(msg[6:]))
	p := dnswire.HeaderLen
	for range qd {
		if p = dnswire.SkipName(msg, p); p < 0 || p+4 > len(msg) {
			return 0, 0, 0
		}
		p += 4
	}
	runOff, runLen, runN := 0, 0, 0
	for range an {
		end := dnswire.SkipRR(msg, p)
		if end < 0 {
			break
		}
		nameEnd := dnswire.SkipName(msg, p)
		typ := binary.BigEndian.Uint16(msg[nameEnd:])
		if typ != dns.TypeA && typ != dns.TypeAAAA {
			runN = 0
		} else if runN > 0 && end-p == runLen && sameRRPrefix(msg, runOff, p, nameEnd-p+2) {
			runN++
		} else {
			runOff, runLen, runN = p, end-p, 1
		}
		if runN > n {
			off, size, n = runOff, runLen, runN
		}
		p = end
	}
	return off, size, n
}

// sameRRPrefix compares the owner and type bytes of the records at a and b.
func sameRRPrefix(msg []byte, a, b, n int) bool {
	return string(msg[a:a+n]) == string(msg[b:b+n])
}
