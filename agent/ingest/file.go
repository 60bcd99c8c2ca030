package ingest

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/meshdns/meshdns/internal/namewire"
)

// FileVersion is one content of a table file (the --nametable-file
// format, protojson's form of a NameTable), read through the descriptor it
// was hashed from, so a rename cannot mix two files. Its JSON is converted
// to the stream's wire form name by name as it is walked (namewire's
// reader, as protojson reads it), never held whole: one walker and one
// comparison serve the file and the stream. A walk fails when the content
// is no longer the one hashed (the file rewritten in place).
//
// Convert readies the conversion into a temporary file in the wire form,
// which the first walk of the names writes while it yields them: the
// walks after it (a patch after a comparison, /debug/nametable) read that
// instead of decoding the JSON again each time (which took 1.4x the time
// of a start and 1.8x that of a small change).
type FileVersion struct {
	r    io.ReaderAt
	size int64
	sum  [sha256.Size]byte
	// zones are the content's zones, read by Convert: its walks yield
	// them first, so a build needs one walk, not three (it needs the
	// zones before the names, which a file holds after them).
	zones []string
	names int // counted by Convert

	mu sync.Mutex // guards the following; held by a walk that converts
	// pending, or nil, is the unlinked temporary file (Convert) that the
	// first complete walk of the names fills with the wire form; wire is
	// that file once filled, of wireSize bytes. They go with the version.
	pending  *os.File
	wire     *os.File
	wireSize int64
}

// ReadFileVersion returns the version of the size bytes of r with their
// SHA-256 computed, and Convert(dir) run meanwhile on another goroutine:
// the hash and the conversion's first pass each read the whole file, and
// a start waited for one after the other. For a content the caller has
// already (the same Sum), the conversion was in vain: Close the version.
// It fails only when r cannot be read; a conversion that failed is
// convErr, and the version walks the JSON instead.
func ReadFileVersion(r io.ReaderAt, size int64, dir string) (v *FileVersion, convErr, err error) {
	v = &FileVersion{r: r, size: size}
	converted := make(chan error, 1)
	go func() { converted <- v.Convert(dir) }()
	h := sha256.New()
	n, err := io.Copy(h, io.NewSectionReader(r, 0, size))
	if err == nil && n != size {
		err = fmt.Errorf("read %d of %d bytes: %w", n, size, io.ErrUnexpectedEOF)
	}
	convErr = <-converted
	if err != nil {
		v.Close()
		return nil, nil, err
	}
	v.sum = [sha256.Size]byte(h.Sum(nil))
	return v, convErr, nil
}

// Sum is the SHA-256 of the version's content.
func (v *FileVersion) Sum() [sha256.Size]byte { return v.sum }

// ID is "file-" and the start of the content's hash.
func (v *FileVersion) ID() string { return "file-" + hex.EncodeToString(v.sum[:6]) }

// errFileChanged: the file's content changed while it was walked.
var errFileChanged = errors.New("the table file changed since it was read")

// Convert readies the version's conversion to the wire form: it reads the
// file's zones (a pass over its brackets, nothing decoded; the walk that
// converts checks the file strictly and against them) and makes an
// unlinked temporary file in dir ("" for the system's) for the wire form,
// which the first walk of the names fills. On error the version walks the
// JSON every time; a file that does not convert is rejected by the build
// that walks it. Convert before the version is applied (walks may run
// from other goroutines after that); Close releases the file.
func (v *FileVersion) Convert(dir string) error {
	zones, names, err := namewire.SkimJSONTable(io.NewSectionReader(v.r, 0, v.size))
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "meshdns-nametable-*.pb")
	if err != nil {
		return err
	}
	os.Remove(f.Name()) // the descriptor keeps it while the version lives
	v.zones, v.names, v.pending = zones, names, f
	return nil
}

// Names is the number of names Convert counted (0 before it): what a
// build expects to add (startPace).
func (v *FileVersion) Names() int { return v.names }

// Close releases what Convert made, once the version is no longer served:
// its walks fail afterwards.
func (v *FileVersion) Close() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	var err error
	for _, f := range []*os.File{v.pending, v.wire} {
		if f != nil {
			err = errors.Join(err, f.Close())
		}
	}
	v.pending, v.wire = nil, nil
	return err
}

// Walk walks the names of the file, each in its wire form.
func (v *FileVersion) Walk(name func(host, info []byte) error, zone func(string) error) error {
	v.mu.Lock()
	if v.wire == nil && v.pending == nil {
		v.mu.Unlock()
		return v.walkJSON(name, zone)
	}
	for _, z := range v.zones {
		if zone == nil {
			break
		}
		if err := zone(z); err != nil {
			v.mu.Unlock()
			return err
		}
	}
	if name == nil {
		v.mu.Unlock()
		return nil
	}
	if v.wire == nil {
		defer v.mu.Unlock()
		return v.convertWalk(name)
	}
	r := io.NewSectionReader(v.wire, 0, v.wireSize)
	v.mu.Unlock()
	return namewire.EachNameFrom(r, name, nil)
}

// walkJSON walks the file's JSON, converting each name as it goes.
func (v *FileVersion) walkJSON(name func(host, info []byte) error, zone func(string) error) error {
	h := sha256.New()
	r := io.TeeReader(io.NewSectionReader(v.r, 0, v.size), h)
	zones := func(zones []string) error {
		if zone == nil {
			return nil
		}
		for _, z := range zones {
			if err := zone(z); err != nil {
				return err
			}
		}
		return nil
	}
	var err error
	if name != nil {
		err = namewire.WalkJSONTableWire(r, name, zones)
	} else {
		err = namewire.WalkJSONTable(r, nil, nil, zones)
	}
	if err != nil {
		return err
	}
	if _, err := io.Copy(h, r); err != nil { // what the walk did not read
		return err
	}
	if [sha256.Size]byte(h.Sum(nil)) != v.sum {
		return errFileChanged
	}
	return nil
}
