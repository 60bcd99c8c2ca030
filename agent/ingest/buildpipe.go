package ingest

import (
	"fmt"
	"hash/maphash"
	"strings"

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
	var tb *nametable.Builder
	n := 0
	err := runPipe(newEntryBatch, func(p *pipe[*entryBatch]) (err error) {
		w := &batcher{p: p, conv: newConverting(lim, names), pace: pace, zones: zones}
		n, err = w.run(v, known)
		return err
	}, func(b *entryBatch) (err error) {
		if tb == nil {
			// Room for the names a table adds too (parents, ...).
			if tb, err = newBuilder(b.zones, pod, names+names/8); err != nil {
				return err
			}
		}
		return addBatch(tb, b)
	})
	if err != nil {
		return nil, 0, err
	}
	return tb.Table(), n, nil
}

func newEntryBatch() *entryBatch {
	return &entryBatch{es: make([]nametable.Entry, batchEntries)}
}

// addBatch adds the entries of b to tb.
func addBatch(tb *nametable.Builder, b *entryBatch) error {
	for i := range b.n {
		if err := tb.Add(&b.es[i]); err != nil {
			return fmt.Errorf("%w: %v", ErrInvalidTable, err)
		}
	}
	return nil
}

// batcher converts the names of a walk into batches on a pipe's
// producing goroutine, noting the zones the walk yields before its first
// name unless they are known.
type batcher struct {
	p       *pipe[*entryBatch]
	conv    *converting
	pace    func(int)   // or nil
	b       *entryBatch // being filled
	zones   []string    // known, or walked so far
	started bool        // a name was converted, or the zones are known
}

// run walks v and sends its names in batches, the last (maybe empty)
// after the walk, and returns how many it converted.
func (w *batcher) run(v Version, known bool) (int, error) {
	w.started = known
	if w.pace != nil {
		w.pace(0)
	}
	w.b = w.p.next()
	w.b.n = 0
	var zone func(string) error
	if !known {
		zone = w.zone
	}
	if err := v.Walk(w.name, zone); err != nil {
		return w.conv.n, err
	}
	if w.pace != nil {
		w.pace(w.conv.n) // the table's finish at buildGCPercent, the end's
	}
	w.b.zones = w.zones
	w.p.send(w.b) // the last, maybe empty: it carries the zones
	return w.conv.n, nil
}

// name converts one name into the batch, sent once full.
func (w *batcher) name(host, raw []byte) error {
	if w.p.stopped() {
		return errPipeStopped
	}
	if !w.started {
		if len(w.zones) == 0 {
			return errZonesLater
		}
		w.started = true
	}
	if w.pace != nil && w.conv.n&paceEvery == 0 {
		w.pace(w.conv.n)
	}
	if err := w.conv.convert(&w.b.es[w.b.n], host, raw); err != nil {
		return err
	}
	if w.b.n++; w.b.n < len(w.b.es) {
		return nil
	}
	w.b.zones = w.zones
	w.p.send(w.b)
	w.b = w.p.next()
	w.b.n = 0
	return nil
}

// zone notes a zone the walk yields before the first name.
func (w *batcher) zone(z string) error {
	if w.started {
		return errZonesLater
	}
	w.zones = append(w.zones, z)
	return nil
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

// converting converts the names of one build (or of a decoded table,
// convertTable), rejecting names that appear twice in any case.
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

// newConverting returns the conversion of a build of names names.
func newConverting(lim Limits, names int) *converting {
	// Sized for the names the version holds: grown by doubling, the set
	// was rehashed 17 times on the way to 100,000 names.
	return &converting{lim: lim, hashes: make(map[uint64]struct{}, min(names, lim.MaxNames)), seed: maphash.MakeSeed()}
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
	return c.add(e, string(host), &c.info)
}

// add converts the name host, its NameInfo decoded, into e, reusing e's
// slices. The caller checked the limit of names.
func (c *converting) add(e *nametable.Entry, host string, info *namewire.NameInfo) error {
	if err := convertInto(e, host, info, c.lim); err != nil {
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
