package nametable

import (
	"bytes"
	"slices"
)

// The reverse index is collected while a table is built (or a patch adds
// names) as pending records, the address beside the record reference,
// and sorted once at the end: by address, then cmpPTR.

// pending4 is a pending IPv4 record: the address in the high 32 bits, the
// record reference in the low ones, so that the records sort by address
// as plain integers.
type pending4 uint64

func newPending4(addr, ref uint32) pending4 { return pending4(uint64(addr)<<32 | uint64(ref)) }

func (p pending4) addr() uint32 { return uint32(p >> 32) }
func (p pending4) ref() uint32  { return uint32(p) }

type pending6 struct {
	addr [16]byte
	ref  uint32
}

// addPTRs adds the address records of n to the reverse index. Their order
// does not matter: sortPending orders them by what they hold.
func (b *builder) addPTRs(n *node) {
	t := b.t
	for i := range uint32(n.nA) + uint32(n.nAAAA) {
		ref := n.RR + i
		if i < uint32(n.nA) {
			b.pend4 = append(b.pend4, newPending4(t.addr4(ref), ref))
		} else {
			b.pend6 = append(b.pend6, pending6{addr: t.addr6(ref), ref: ref})
		}
	}
}

// sortPending sorts the pending reverse records by address, then cmpPTR
// of t: New and a patch's merge order them alike.
//
// The IPv4 records, nearly every record of a cluster's table, are sorted
// by address with a radix sort in place (a comparison sort calling back
// per comparison was a third of a table's finish), and only the runs of
// one address, rare, by cmpPTR.
func (b *builder) sortPending(t *Table) {
	sortAddrs(b.pend4, 56)
	for i := 0; i < len(b.pend4); {
		j := i + 1
		for j < len(b.pend4) && b.pend4[j].addr() == b.pend4[i].addr() {
			j++
		}
		if j-i > 1 {
			slices.SortFunc(b.pend4[i:j], func(x, y pending4) int { return t.cmpPTR(x.ref(), y.ref()) })
		}
		i = j
	}
	slices.SortFunc(b.pend6, func(x, y pending6) int {
		if c := bytes.Compare(x.addr[:], y.addr[:]); c != 0 {
			return c
		}
		return t.cmpPTR(x.ref, y.ref)
	})
}

// sortAddrs sorts s by address (the high 32 bits), from the byte at shift
// (56: the whole address) down: an MSD radix sort in place (American
// flag sort), so that sorting costs no copy of the records at the build's
// peak. Records of one address end in any order.
func sortAddrs(s []pending4, shift uint) {
	for {
		if len(s) <= 32 {
			// Insertion sort: the buckets of the last bytes are small.
			for i := 1; i < len(s); i++ {
				for j := i; j > 0 && s[j].addr() < s[j-1].addr(); j-- {
					s[j], s[j-1] = s[j-1], s[j]
				}
			}
			return
		}
		var count [256]int
		for _, x := range s {
			count[uint8(x>>shift)]++
		}
		if count[uint8(s[0]>>shift)] == len(s) {
			// One value of this byte (10 of 10.0.0.0/8): the next.
			if shift == 32 {
				return
			}
			shift -= 8
			continue
		}
		var next, end [256]int
		sum := 0
		for d, c := range count {
			next[d] = sum
			sum += c
			end[d] = sum
		}
		// Move each record to its bucket, taking the one found there
		// onward until a record of the bucket being filled turns up.
		for d := range 256 {
			for next[d] < end[d] {
				x := s[next[d]]
				for xd := int(uint8(x >> shift)); xd != d; xd = int(uint8(x >> shift)) {
					s[next[xd]], x = x, s[next[xd]]
					next[xd]++
				}
				s[next[d]] = x
				next[d]++
			}
		}
		if shift == 32 {
			return
		}
		lo := 0
		for d := range 256 {
			if end[d]-lo > 1 {
				sortAddrs(s[lo:end[d]], shift-8)
			}
			lo = end[d]
		}
		return
	}
}

// finishReverse sorts the reverse index by address, then cmpPTR, and
// keeps one record per owner name of an address, the first (the lowest
// TTL).
func (b *builder) finishReverse() {
	b.sortPending(b.t)
	var n4, n6 int
	b.t.rev4, n4 = uniqueRev(b.t, b.pend4, func(e pending4) (uint32, uint32) { return e.addr(), e.ref() })
	b.t.rev6, n6 = uniqueRev(b.t, b.pend6, func(e pending6) ([16]byte, uint32) { return e.addr, e.ref })
	b.pend4, b.pend6 = nil, nil
	b.t.revAddrs = n4 + n6
}

// uniqueRev returns the references of the sorted s, without those whose
// record has the owner of an earlier one of the same address, and the
// number of distinct addresses. Only an address of several records has
// its records' owners read: most addresses have one.
func uniqueRev[E any, A comparable](t *Table, s []E, get func(E) (A, uint32)) ([]uint32, int) {
	out := make([]uint32, 0, len(s))
	run, distinct := 0, 0 // start of the current address's run in out
	var last A
	for i, e := range s {
		addr, ref := get(e)
		if i == 0 || addr != last {
			run = len(out)
			distinct++
			last = addr
			out = append(out, ref)
			continue
		}
		owner := t.rrAt(ref).Header().Name
		if slices.ContainsFunc(out[run:], func(o uint32) bool { return t.rrAt(o).Header().Name == owner }) {
			continue
		}
		out = append(out, ref)
	}
	return slices.Clip(out), distinct
}
