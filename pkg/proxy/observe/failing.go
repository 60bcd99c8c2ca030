package observe

import (
	"bytes"
	"hash/maphash"
	"slices"
	"sync"

	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/internal/dnswire"
)

// The failing-names summary answers "which names fail for this pod, and
// how often" in fixed memory, whatever the pod asks: the Space-Saving
// heavy-hitters algorithm (Metwally, Agrawal, El Abbadi, "Efficient
// computation of frequent and top-k elements in data streams", 2005) over
// a fixed array of slots. A name not in a full summary takes the slot of
// the least counted one, so a name asked more than (failing answers)/slots
// times in a window is always in it, and the counts reported (the count
// minus what the slot's previous holders left in it) never overstate.

// Bounds of the summary.
const (
	// DefaultFailingTopN is the names a report carries when the settings
	// give no number.
	DefaultFailingTopN = 10
	// MaxFailingTopN bounds the names of a report; larger settings are
	// cut to it.
	MaxFailingTopN = 50
	// failingSlotsPerName: the summary tracks this many names per name
	// reported, so the top ones are exact unless the window saw more
	// distinct failing names than slots.
	failingSlotsPerName = 4
)

// FailingName is one name that failed in a window: its rcode and how
// many answers had it.
type FailingName struct {
	// Name is the query name, lowercase, with the trailing dot.
	Name string
	// Rcode is dns.RcodeServerFailure, dns.RcodeNameError or
	// dns.RcodeRefused.
	Rcode int
	// Count is a lower bound of the answers with Rcode for Name since the
	// last Take: exact when the window saw no more distinct failing
	// (name, rcode) pairs than the summary has slots.
	Count uint64
}

// failSlot is one tracked (name, rcode), its name in FailingNames.names:
// a pass over the slots reads 32 bytes each, not the names.
type failSlot struct {
	hash  uint64
	count uint64 // answers counted in this slot since it was taken
	over  uint64 // of count, what earlier holders of the slot left (the overestimate)
	rcode uint8
	n     uint8 // name length (wire form; a wire name is at most 255 bytes)
}

// FailingNames counts failing answers per (name, rcode) in fixed memory:
// topN*failingSlotsPerName slots of 32 bytes and as many names of 255,
// fixed at NewFailingNames. Safe for concurrent use.
type FailingNames struct {
	topN int
	seed maphash.Seed

	mu    sync.Mutex // guards following
	slots []failSlot // len = slots in use; cap fixed
	names []byte     // slot i's name at i*MaxNameLen
	total uint64     // failing answers since the last Take
}

// NewFailingNames returns an empty summary that reports topN names
// (DefaultFailingTopN when topN <= 0, at most MaxFailingTopN).
func NewFailingNames(topN int) *FailingNames {
	if topN <= 0 {
		topN = DefaultFailingTopN
	}
	topN = min(topN, MaxFailingTopN)
	n := topN * failingSlotsPerName
	return &FailingNames{topN: topN, seed: maphash.MakeSeed(), slots: make([]failSlot, 0, n), names: make([]byte, n*dnswire.MaxNameLen)}
}

// TopN is the most names Take returns.
func (f *FailingNames) TopN() int { return f.topN }

// failingRcode reports whether answers with rcode are counted: the
// answers that tell of a failure (a missing name, a broken or refusing
// resolver, a policy's denial), not a client's malformed query.
func failingRcode(rcode int) bool {
	return rcode == dns.RcodeNameError || rcode == dns.RcodeServerFailure || rcode == dns.RcodeRefused
}

// record counts one answer with rcode for the lowercased wire name lname.
// It allocates nothing; its cost is one pass over the slots in use.
func (f *FailingNames) record(lname []byte, rcode int) {
	if len(lname) == 0 || len(lname) > dnswire.MaxNameLen || !failingRcode(rcode) {
		return
	}
	h := maphash.Bytes(f.seed, lname) ^ uint64(rcode)
	rc := uint8(rcode)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.total++
	least := -1
	for i := range f.slots {
		s := &f.slots[i]
		if s.hash == h && s.rcode == rc && bytes.Equal(f.name(i, s), lname) {
			s.count++
			return
		}
		if least < 0 || s.count < f.slots[least].count {
			least = i
		}
	}
	if len(f.slots) < cap(f.slots) {
		f.slots = f.slots[:len(f.slots)+1]
		least = len(f.slots) - 1
		f.slots[least].count = 0
	}
	s := &f.slots[least]
	// The newcomer inherits the evicted count (Space-Saving): over
	// remembers how much of it is not its own.
	s.hash, s.rcode, s.n = h, rc, uint8(len(lname))
	copy(f.names[least*dnswire.MaxNameLen:], lname)
	s.over = s.count
	s.count++
}

// name is the name of slot i.
func (f *FailingNames) name(i int, s *failSlot) []byte {
	return f.names[i*dnswire.MaxNameLen : i*dnswire.MaxNameLen+int(s.n)]
}

// Take returns the names that failed most since the last Take (at most
// TopN, the most frequent first) and the number of failing answers
// counted, and starts a new window.
func (f *FailingNames) Take() ([]FailingName, uint64) {
	f.mu.Lock()
	type entry struct {
		name  []byte
		rcode int
		count uint64
	}
	top := make([]entry, 0, len(f.slots))
	for i := range f.slots {
		s := &f.slots[i]
		top = append(top, entry{name: append([]byte(nil), f.name(i, s)...), rcode: int(s.rcode), count: s.count - s.over})
	}
	total := f.total
	f.slots, f.total = f.slots[:0], 0
	f.mu.Unlock()
	slices.SortFunc(top, func(a, b entry) int {
		if a.count != b.count {
			if a.count > b.count {
				return -1
			}
			return 1
		}
		if c := bytes.Compare(a.name, b.name); c != 0 {
			return c
		}
		return a.rcode - b.rcode
	})
	top = top[:min(len(top), f.topN)]
	out := make([]FailingName, len(top))
	for i, e := range top {
		out[i] = FailingName{Name: wireName(e.name), Rcode: e.rcode, Count: e.count}
	}
	return out, total
}

// SetFailingNames counts failing answers in f from now on; nil stops
// it.
func (o *Observer) SetFailingNames(f *FailingNames) { o.failing.Store(f) }

// recordFailing is Observe's hook for an answer that is not a success
// (Observe makes the one comparison a successful answer pays): one atomic
// load while no summary is set.
func (o *Observer) recordFailing(oc *Outcome) {
	if oc.Query.NameEnd == 0 {
		return
	}
	if f := o.failing.Load(); f != nil {
		f.record(oc.Query.LName(), oc.Rcode)
	}
}
