package ingest

import (
	"fmt"
	"io"
	"slices"

	"github.com/meshdns/meshdns/internal/namewire"
)

// The first walk of a table file's names converts its JSON to the wire
// form on a goroutine of its own, in batches that the walk's caller (the
// build or the comparison) consumes as they come: a start from a file of
// 100,000 services decoded it (a third of its CPU time) before the build
// began, on one core, where the sidecar has two and no CPU limit.

// pipeBatch is the size a batch of wire form is sent at: the pipe holds
// about 320 KiB whatever the table's size.
const pipeBatch = 64 << 10

// convertWalk walks the names of the file's JSON in wire form and fills
// v.pending with that wire form as it goes (batches are written by the
// converting goroutine, then handed to name in the caller's goroutine, in
// the file's order). A complete walk makes the file v.wire; one that fails
// leaves it empty for the next walk to fill. v.mu is held.
func (v *FileVersion) convertWalk(name func(host, info []byte) error) error {
	f := v.pending
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	if err := f.Truncate(0); err != nil {
		return err
	}
	var size int64
	err := runPipe(newWireBatch, func(p *pipe[[]byte]) (err error) {
		size, err = v.fillWire(p, f)
		return err
	}, func(b []byte) error {
		return namewire.EachName(b, name, nil)
	})
	if err != nil {
		// The next walk empties it too, and says if it cannot. err
		// itself is returned as it is: build compares it.
		_ = f.Truncate(0)
		return err
	}
	v.wire, v.wireSize, v.pending = f, size, nil
	return nil
}

func newWireBatch() []byte { return make([]byte, 0, pipeBatch+pipeBatch/4) }

// fillWire walks the file's JSON on a pipe's producing goroutine and
// sends its wire form in batches, each written to f first, the zones
// last; it returns the bytes written.
func (v *FileVersion) fillWire(p *pipe[[]byte], f io.Writer) (int64, error) {
	w := &wireBatcher{p: p, f: f, b: p.next()[:0]}
	err := v.walkJSON(w.name, w.zone)
	if err == nil && !slices.Equal(w.zones, v.zones) {
		// Read from the same bytes (their hash is checked): only a file
		// the first pass could not read right gets here.
		err = fmt.Errorf("%w: zones %q, but %q when the file was first read", ErrInvalidTable, w.zones, v.zones)
	}
	if err != nil {
		return w.size, err
	}
	for _, z := range w.zones {
		w.b = namewire.AppendZone(w.b, z)
	}
	return w.size, w.send()
}

// wireBatcher appends the names of a walk in wire form to a batch, sent
// once it holds pipeBatch bytes.
type wireBatcher struct {
	p     *pipe[[]byte]
	f     io.Writer // where every batch is written before it is sent
	b     []byte    // being filled
	size  int64     // written to f
	zones []string  // as walked, sent after the names
}

func (w *wireBatcher) name(host, info []byte) error {
	if w.p.stopped() {
		return errPipeStopped
	}
	if w.b = namewire.AppendEntry(w.b, host, info); len(w.b) < pipeBatch {
		return nil
	}
	if err := w.send(); err != nil {
		return err
	}
	w.b = w.p.next()[:0]
	return nil
}

func (w *wireBatcher) zone(z string) error {
	w.zones = append(w.zones, z)
	return nil
}

// send writes the batch to f and hands it to the consumer.
func (w *wireBatcher) send() error {
	if _, err := w.f.Write(w.b); err != nil {
		return err
	}
	w.size += int64(len(w.b))
	w.p.send(w.b)
	return nil
}
