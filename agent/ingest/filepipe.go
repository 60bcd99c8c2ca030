package ingest

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"sync/atomic"

	"github.com/meshdns/meshdns/internal/namewire"
)

// The first walk of a table file's names converts its JSON to the wire
// form on a goroutine of its own, in batches that the walk's caller (the
// build or the comparison) consumes as they come: a start from a file of
// 100,000 services decoded it (a third of its CPU time) before the build
// began, on one core, where the sidecar has two and no CPU limit.

const (
	// pipeBatch is the size a batch of wire form is sent at.
	pipeBatch = 64 << 10
	// pipeDepth is how many batches wait for the consumer at most: the
	// pipeline holds pipeDepth+1 batches (about 320 KiB) whatever the
	// table's size.
	pipeDepth = 4
)

// errPipeStopped stops the converting goroutine once the consumer failed.
var errPipeStopped = errors.New("walk stopped")

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
	full := make(chan []byte, pipeDepth)
	free := make(chan []byte, pipeDepth+1)
	for range pipeDepth + 1 {
		free <- make([]byte, 0, pipeBatch+pipeBatch/4)
	}
	var stop atomic.Bool
	var size int64
	done := make(chan error, 1)
	go func() {
		defer close(full)
		b := <-free
		send := func() error {
			if _, err := f.Write(b); err != nil {
				return err
			}
			size += int64(len(b))
			full <- b
			return nil
		}
		var zones []string
		err := v.walkJSON(func(host, info []byte) error {
			if stop.Load() {
				return errPipeStopped
			}
			if b = namewire.AppendEntry(b, host, info); len(b) < pipeBatch {
				return nil
			}
			if err := send(); err != nil {
				return err
			}
			b = (<-free)[:0]
			return nil
		}, func(z string) error {
			zones = append(zones, z)
			return nil
		})
		if err == nil && !slices.Equal(zones, v.zones) {
			// Read from the same bytes (their hash is checked): only a
			// file the first pass could not read right gets here.
			err = fmt.Errorf("%w: zones %q, but %q when the file was first read", ErrInvalidTable, zones, v.zones)
		}
		if err == nil {
			for _, z := range zones {
				b = namewire.AppendZone(b, z)
			}
			err = send()
		}
		done <- err
	}()
	var err error
	for b := range full {
		if err == nil {
			if err = namewire.EachName(b, name, nil); err != nil {
				stop.Store(true)
			}
		}
		free <- b
	}
	if perr := <-done; err == nil {
		err = perr
	}
	if err != nil {
		// The next walk empties it too, and says if it cannot. err
		// itself is returned as it is: build compares it.
		_ = f.Truncate(0)
		return err
	}
	v.wire, v.wireSize, v.pending = f, size, nil
	return nil
}
