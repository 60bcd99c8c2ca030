package ingest

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"unsafe"

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
// Convert does that conversion once, into a temporary file in the wire
// form: the walks of a comparison, a patch and a build then read that
// instead of decoding the JSON again each time (which took 1.4x the time
// of a start and 1.8x that of a small change).
type FileVersion struct {
	r    io.ReaderAt
	size int64
	sum  [sha256.Size]byte
	// wire, or nil, is the content in wire form (Convert), of wireSize
	// bytes, unlinked: it goes with the version.
	wire     *os.File
	wireSize int64
	// zones are the content's zones, read by Convert: its walks yield
	// them first, so a build needs one walk, not three (it needs the
	// zones before the names, which a file holds after them).
	zones []string
}

// NewFileVersion returns the version of the size bytes of r, whose
// SHA-256 is sum. r must stay readable while the version is served.
func NewFileVersion(r io.ReaderAt, size int64, sum [sha256.Size]byte) *FileVersion {
	return &FileVersion{r: r, size: size, sum: sum}
}

// ID is "file-" and the start of the content's hash.
func (v *FileVersion) ID() string { return "file-" + hex.EncodeToString(v.sum[:6]) }

// errFileChanged: the file's content changed while it was walked.
var errFileChanged = errors.New("the table file changed since it was read")

// Convert writes the version's wire form into an unlinked temporary file
// in dir ("" for the system's) that later walks read. On error the
// version walks the JSON as before; a file that does not convert is
// rejected by the build that walks it. Convert before the version is
// applied (walks may run from other goroutines after that); Close
// releases the file.
func (v *FileVersion) Convert(dir string) error {
	// The decoder's garbage (a string per field of every name) is
	// collected as it goes, under the limit of a change in place, not
	// left to grow the heap by GOGC's headroom beside the table served.
	defer changeLimit()()
	f, err := os.CreateTemp(dir, "meshdns-nametable-*.pb")
	if err != nil {
		return err
	}
	os.Remove(f.Name()) // the descriptor keeps it while the version lives
	w := bufio.NewWriterSize(f, 32<<10)
	var zones []string
	var b []byte
	err = v.walkJSON(func(host, info []byte) error {
		b = namewire.AppendEntry(b[:0], host, info)
		_, err := w.Write(b)
		return err
	}, func(z string) error {
		zones = append(zones, z)
		return nil
	})
	for _, z := range zones {
		if err == nil {
			_, err = w.Write(namewire.AppendZone(b[:0], z))
		}
	}
	if err == nil {
		err = w.Flush()
	}
	var size int64
	if err == nil {
		size, err = f.Seek(0, io.SeekCurrent)
	}
	if err != nil {
		f.Close()
		return err
	}
	v.wire, v.wireSize, v.zones = f, size, zones
	return nil
}

// Close releases what Convert made, once the version is no longer served:
// its walks fail afterwards.
func (v *FileVersion) Close() error {
	if v.wire == nil {
		return nil
	}
	return v.wire.Close()
}

// Walk walks the names of the file, each in its wire form.
func (v *FileVersion) Walk(name func(host, info []byte) error, zone func(string) error) error {
	if v.wire != nil {
		for _, z := range v.zones {
			if zone == nil {
				break
			}
			if err := zone(z); err != nil {
				return err
			}
		}
		if name == nil {
			return nil
		}
		return namewire.EachNameFrom(io.NewSectionReader(v.wire, 0, v.wireSize), name, nil)
	}
	return v.walkJSON(name, zone)
}

// walkJSON walks the file's JSON, converting each name as it goes.
func (v *FileVersion) walkJSON(name func(host, info []byte) error, zone func(string) error) error {
	h := sha256.New()
	r := io.TeeReader(io.NewSectionReader(v.r, 0, v.size), h)
	var each func(string, *namewire.NameInfo) error
	if name != nil {
		var buf []byte
		each = func(host string, info *namewire.NameInfo) error {
			buf = info.Append(buf[:0])
			return name(unsafe.Slice(unsafe.StringData(host), len(host)), buf)
		}
	}
	err := namewire.WalkJSONTable(r, new(namewire.NameInfo), each, func(zones []string) error {
		if zone == nil {
			return nil
		}
		for _, z := range zones {
			if err := zone(z); err != nil {
				return err
			}
		}
		return nil
	})
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
