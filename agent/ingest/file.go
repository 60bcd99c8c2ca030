package ingest

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
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
type FileVersion struct {
	r    io.ReaderAt
	size int64
	sum  [sha256.Size]byte
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

// Walk walks the names of the file, each converted to its wire form.
func (v *FileVersion) Walk(name func(host, info []byte) error, zone func(string) error) error {
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
