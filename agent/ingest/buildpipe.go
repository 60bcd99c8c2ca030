package ingest

import (
	"fmt"
	"hash/maphash"
	"strings"
	"sync/atomic"

	"github.com/meshdns/meshdns/internal/namewire"
	"github.com/meshdns/meshdns/pkg/nametable"
)

// A build walks the version and converts its names into entries on a
// goroutine of its own, in batches that the caller's goroutine adds to the
// table's builder as they come: the conversion (decoding, checking and
// parsing every name) was a third of a build's CPU time on the one core
// the build ran on, where the sidecar has two and no CPU limit.

// entryBatch is a batch of converted entries; its entries' slices are
// reused by the next conversion into them.
type entryBatch struct {
	es    []nametable.Entry
	n     int      // entries of es converted
	zones []string // the version's zones, as walked (never changed once sent)
}

// batchEntries is the size of a batch, in entries.
const batchEntries = 128

// pipeBuild builds the table of v for pod, with zones when known, else
// with v's zones as its walk yields them before the first name: then a
// name before any zone or a zone after a name stops it with
// errZonesLater. names is how many names v holds, or 0 when unknown. pace,
// or nil, is called with the names converted so far.
func pipeBuild(v Version, zones []string, known bool, names int, lim Limits, pod nametable.Context, pace func(int)) (*nametable.Table, int, error) {
	full := make(chan *entryBatch, pipeDepth)
	free := make(chan *entryBatch, pipeDepth+1)
	for range pipeDepth + 1 {
		free <- &entryBatch{es: make([]nametable.Entry, batchEntries)}
	}
	var stop atomic.Bool
	type result struct {
		n   int
		err error
	}
	done := make(chan result, 1)
	go func() {
		defer close(full)
		// Sized for the names the version holds: grown by doubling, the
		// set was rehashed 17 times on the way to 100,000 names.
		conv := &converting{lim: lim, hashes: make(map[uint64]struct{}, min(names, lim.MaxNames)), seed: maphash.MakeSeed()}
		if pace != nil {
			pace(0)
		}
		walked := zones
		started := known
		b := <-free
		b.n = 0
		name := func(host, raw []byte) error {
			if stop.Load() {
				return errPipeStopped
			}
			if !started {
				if len(walked) == 0 {
					return errZonesLater
				}
				started = true
			}
			if pace != nil && conv.n&paceEvery == 0 {
				pace(conv.n)
			}
			if err := conv.convert(&b.es[b.n], host, raw); err != nil {
				return err
			}
			if b.n++; b.n < len(b.es) {
				return nil
			}
			b.zones = walked
			full <- b
			b = <-free
			b.n = 0
			return nil
		}
		var zone func(string) error
		if !known {
			zone = func(z string) error {
				if started {
					return errZonesLater
				}
				walked = append(walked, z)
				return nil
			}
		}
		err := v.Walk(name, zone)
		if err == nil {
			if pace != nil {
				pace(conv.n) // the table's finish at buildGCPercent, the end's
			}
			b.zones = walked
			full <- b // the last, maybe empty: it carries the zones
		}
		done <- result{conv.n, err}
	}()
	var tb *nametable.Builder
	var err error
	for b := range full {
		if err == nil && tb == nil {
			tb, err = newBuilder(b.zones, pod, names+names/8) // and the names a table adds (parents, ...)
		}
		for i := 0; err == nil && i < b.n; i++ {
			if aerr := tb.Add(&b.es[i]); aerr != nil {
				err = fmt.Errorf("%w: %v", ErrInvalidTable, aerr)
			}
		}
		if err != nil {
			stop.Store(true)
		}
		free <- b
	}
	// A failure of the converting goroutine is at a name after those
	// added: the builder's, if any, came first.
	r := <-done
	if err == nil {
		err = r.err
	}
	if err != nil {
		return nil, 0, err
	}
	return tb.Table(), r.n, nil
}

// newBuilder converts the zone names and returns a table builder for pod
// with those zones.
func newBuilder(zoneNames []string, pod nametable.Context, names int) (*nametable.Builder, error) {
	zones, err := convertZones(zoneNames)
	if err != nil {
		return nil, err
	}
	return nametable.NewBuilder(zones, pod, names)
}

// namesOf is the number of names of v when it knows it, else 0.
func namesOf(v Version) int {
	if c, ok := v.(interface{ Names() int }); ok {
		return min(max(c.Names(), 0), 1<<24) // no index holds more
	}
	return 0
}

// converting converts the names of one build, rejecting names that
// appear twice in any case.
type converting struct {
	lim  Limits
	info namewire.NameInfo // reused by every name
	n    int
	// hashes remembers the names by a hash under seed: a set of the
	// names themselves held them all (~6 MB at 100,000 names) beside the
	// table being built, at the build's peak. Two names sharing a 64-bit
	// hash under a per-build random seed (about one build in 10^9 at
	// 100,000 names) would reject the table as a duplicate; the previous
	// table keeps serving and the next build draws another seed.
	hashes map[uint64]struct{}
	seed   maphash.Seed
}

// convert converts the name host, its NameInfo in wire form raw, into e,
// reusing e's slices.
func (c *converting) convert(e *nametable.Entry, host, raw []byte) error {
	if c.n >= c.lim.MaxNames {
		return fmt.Errorf("%w: more than the limit of %d names", ErrInvalidTable, c.lim.MaxNames)
	}
	if err := c.info.Unmarshal(raw); err != nil {
		return fmt.Errorf("%w: name %q: %v", ErrInvalidTable, host, err)
	}
	if err := convertInto(e, string(host), &c.info, c.lim); err != nil {
		return fmt.Errorf("%w: name %q: %v", ErrInvalidTable, host, err)
	}
	c.n++
	// Two keys differing only in case: the agent matches names
	// case-insensitively, so one would silently shadow the other.
	h := maphash.String(c.seed, strings.ToLower(e.Hostname))
	if _, ok := c.hashes[h]; ok {
		return fmt.Errorf("%w: name %q appears twice (names are case-insensitive)", ErrInvalidTable, host)
	}
	c.hashes[h] = struct{}{}
	return nil
}
