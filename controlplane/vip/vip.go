// Package vip allocates virtual IPs to hostnames that have no addresses of
// their own. The allocation is a pure function of the set of hostnames and
// the pools: every replica and every restart computes the same addresses,
// with no state to store or share.
package vip

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math/big"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// ErrExhausted is returned when a pool has fewer addresses than hostnames.
var ErrExhausted = errors.New("vip pool exhausted")

// Allocator assigns addresses from one IPv4 and one IPv6 pool, each the
// concatenation of the prefixes of its family in the order given.
type Allocator struct {
	v4, v6 pool
}

type pool struct {
	prefixes []netip.Prefix
	sizes    []uint64 // usable addresses per prefix
	total    uint64
}

// maxPrefixSize caps the addresses used from one prefix; a v6 /48 has 2^80,
// far more than a 64-bit hash can address evenly, and 2^62 is plenty.
const maxPrefixSize = uint64(1) << 62

// New returns an allocator for cidrs. Either family may be missing; then
// hostnames get no address of that family.
func New(cidrs []netip.Prefix) (*Allocator, error) {
	a := &Allocator{}
	for _, p := range cidrs {
		if !p.IsValid() {
			return nil, fmt.Errorf("vip cidr %v: invalid", p)
		}
		p = p.Masked()
		hostBits := p.Addr().BitLen() - p.Bits()
		var size uint64
		switch {
		case hostBits >= 62:
			size = maxPrefixSize
		case p.Addr().Is4() && hostBits >= 2:
			// Skip the network and broadcast addresses.
			size = (uint64(1) << hostBits) - 2
		case p.Addr().Is6() && hostBits >= 1:
			// Skip the subnet-router anycast address (all zeros).
			size = (uint64(1) << hostBits) - 1
		default:
			size = 1
		}
		pl := &a.v6
		if p.Addr().Is4() {
			pl = &a.v4
		}
		pl.prefixes = append(pl.prefixes, p)
		pl.sizes = append(pl.sizes, size)
		if pl.total+size < pl.total || pl.total+size > maxPrefixSize {
			pl.total = maxPrefixSize
		} else {
			pl.total += size
		}
	}
	return a, nil
}

// Assign returns the addresses (v4 first, then v6) of each hostname. The
// result depends only on the set of hostnames, never on their order.
//
// Each hostname has a home slot per family, hash(hostname) mod pool size.
// Hostnames are placed in sorted order in two passes: first every one
// whose home slot is free takes it, then the rest probe hash(hostname, 1),
// hash(hostname, 2), ... So a hostname keeps its address when others come
// and go, unless a name sorting before it gets the same home slot (with
// 1,000 names in a /16 that happens to ~1.5% of the names once).
func (a *Allocator) Assign(hostnames []string) (map[string][]netip.Addr, error) {
	hs := make([]string, 0, len(hostnames))
	for _, h := range hostnames {
		hs = append(hs, canonical(h))
	}
	slices.Sort(hs)
	hs = slices.Compact(hs)
	out := make(map[string][]netip.Addr, len(hs))
	var errs []error
	for _, pl := range []*pool{&a.v4, &a.v6} {
		if pl.total == 0 {
			continue
		}
		slots, err := pl.place(hs)
		if err != nil {
			errs = append(errs, err)
		}
		for h, s := range slots {
			out[h] = append(out[h], pl.addr(s))
		}
	}
	// Return the canonical names' addresses under the spellings asked for.
	res := make(map[string][]netip.Addr, len(hostnames))
	for _, h := range hostnames {
		if as, ok := out[canonical(h)]; ok {
			res[h] = as
		}
	}
	return res, errors.Join(errs...)
}

func (pl *pool) place(hs []string) (map[string]uint64, error) {
	taken := make(map[uint64]bool, len(hs))
	slots := make(map[string]uint64, len(hs))
	var rest []string
	for _, h := range hs {
		s := slot(h, 0, pl.total)
		if taken[s] {
			rest = append(rest, h)
			continue
		}
		taken[s] = true
		slots[h] = s
	}
	for _, h := range rest {
		if uint64(len(taken)) >= pl.total {
			return slots, fmt.Errorf("%w: %d addresses for %d names", ErrExhausted, pl.total, len(hs))
		}
		for i := uint64(1); ; i++ {
			var s uint64
			if i <= 64 {
				s = slot(h, i, pl.total)
			} else {
				// A nearly full pool: scan on from the last probe.
				s = (slot(h, 64, pl.total) + i - 64) % pl.total
			}
			if !taken[s] {
				taken[s] = true
				slots[h] = s
				break
			}
		}
	}
	return slots, nil
}

func slot(h string, probe, size uint64) uint64 {
	sum := sha256.Sum256([]byte(h + "#" + strconv.FormatUint(probe, 10)))
	return binary.BigEndian.Uint64(sum[:8]) % size
}

// addr maps slot s to an address of the pool.
func (pl *pool) addr(s uint64) netip.Addr {
	for i, p := range pl.prefixes {
		if s < pl.sizes[i] {
			// Skip the network (v4) or anycast (v6) address at offset 0.
			off := s
			if p.Addr().BitLen()-p.Bits() >= 1 && pl.sizes[i] > 1 {
				off++
			}
			return add(p.Addr(), off)
		}
		s -= pl.sizes[i]
	}
	return netip.Addr{} // unreachable: s < total
}

func add(a netip.Addr, off uint64) netip.Addr {
	b := a.As16()
	n := new(big.Int).SetBytes(b[:])
	n.Add(n, new(big.Int).SetUint64(off))
	nb := n.FillBytes(make([]byte, 16))
	r := netip.AddrFrom16([16]byte(nb))
	if a.Is4() {
		return r.Unmap()
	}
	return r
}

func canonical(h string) string { return strings.ToLower(strings.TrimSuffix(h, ".")) }
