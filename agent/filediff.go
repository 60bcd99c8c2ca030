package agent

import (
	"bufio"
	"crypto/sha256"
	"errors"
	"io"
	"strings"

	"github.com/meshdns/meshdns/internal/hashdiff"
	"github.com/meshdns/meshdns/internal/namewire"
	"github.com/meshdns/meshdns/pkg/nametable"
)

// A new table file usually changes a few names of the last one. Built
// whole, it would hold a second table beside the one serving (the pod's
// peak); instead the agent compares it with the content last applied,
// which it keeps readable through that file's open descriptor (a rename
// or a ConfigMap's symlink swap leaves the old content to it), and patches
// the table with the names that differ (nametable Table.Patch). Anything
// unusual (the old content rewritten in place, a field it does not know,
// too many changes, a patch the table refuses) falls back to the whole
// build, which is also what validates a file strictly.

// eachFileName calls name with every name of a table file and the raw
// JSON of its NameInfo (valid during the call), and returns the hash of
// the whole content. It checks the file's shape as the build does
// (walkTableFile), not the NameInfos.
func eachFileName(r io.Reader, name func(host string, raw []byte) error) ([sha256.Size]byte, error) {
	var sum [sha256.Size]byte
	h := sha256.New()
	tee := io.TeeReader(r, h)
	err := walkTableFile(bufio.NewReaderSize(tee, 32<<10), name, func([]string) error { return nil }, func() {})
	if err != nil {
		return sum, err
	}
	if _, err := io.Copy(io.Discard, tee); err != nil { // what the decoder did not read, hashed
		return sum, err
	}
	copy(sum[:], h.Sum(nil))
	return sum, nil
}

var errFileDiff = errors.New("not a patch")

// fileDiff is what a new table file changes in the last one applied: the
// entries a patch removes and adds, or, for a change of more than
// hashdiff.MaxPatchShare of the names, the walks of every name of the two files,
// which a staged replacement reads (staged); and the new file's number of
// names.
type fileDiff struct {
	remove, add []nametable.Entry
	staged      *stagedChange
	names       int
}

// fileChange compares the content of old (whose hash was oldSum, about
// names names) with that of next (newSum) and returns what next changes.
// ok is false when the table is better built whole. It holds two 64-bit hashes per name of old
// meanwhile (internal/hashdiff), not during a staged replacement; a
// collision makes the patch define a name twice or come to another number
// of names, and the table is then built whole.
func fileChange(old, next io.ReadSeeker, oldSum, newSum [sha256.Size]byte, names int, lim Limits) (d fileDiff, ok bool, err error) {
	lim = lim.withDefaults()
	if _, err := old.Seek(0, io.SeekStart); err != nil {
		return d, false, err
	}
	// Sized once: grown by appends, the hashes would take up to twice
	// their size while they grow, at the start of a replacement.
	base := hashdiff.New(names)
	sum, err := eachFileName(old, func(host string, raw []byte) error {
		base.AddString(host, raw)
		return nil
	})
	if err != nil || sum != oldSum {
		return d, false, nil // not the content applied: build whole
	}
	base.Seal()
	conv := func(host string, raw []byte) (nametable.Entry, error) {
		info := new(namewire.NameInfo)
		if err := info.DecodeJSON(raw); err != nil {
			return nametable.Entry{}, err
		}
		return convertInfo(host, info, lim)
	}
	if _, err := next.Seek(0, io.SeekStart); err != nil {
		return d, false, err
	}
	// Compared first, converted after: a change too large for a patch
	// would otherwise hold a quarter of the table's entries converted
	// before it is known to be one.
	changed := 0
	sum, err = eachFileName(next, func(host string, raw []byte) error {
		d.names++
		if !base.MatchString(host, raw) {
			changed++
		}
		return nil
	})
	if err != nil || sum != newSum {
		return fileDiff{}, false, nil
	}
	if !base.Small(changed) {
		// Staged, every entry is replaced (stage.go): the hashes go
		// before the stages, which read the two files whole.
		all := func(string, []byte) bool { return true }
		d.staged = &stagedChange{
			old: fileWalk(old, oldSum, all), next: fileWalk(next, newSum, all),
			convertOld: conv, convertNext: conv,
			names: d.names,
		}
		return d, true, nil
	}
	changedNext := fileWalk(next, newSum, func(host string, raw []byte) bool { return !base.SameString(host, raw) })
	err = changedNext(func(host string, raw []byte) error {
		e, err := conv(strings.Clone(host), raw) // host is the walk's
		if err != nil {
			return errFileDiff // the whole build reports it
		}
		d.add = append(d.add, e)
		return nil
	})
	if err != nil {
		return fileDiff{}, false, nil
	}
	// What was not matched is removed or replaced.
	if _, err := old.Seek(0, io.SeekStart); err != nil {
		return fileDiff{}, false, err
	}
	_, err = eachFileName(old, func(host string, raw []byte) error {
		if !base.ChangedString(host) {
			return nil
		}
		e, err := conv(host, raw)
		if err != nil {
			return err
		}
		d.remove = append(d.remove, e)
		return nil
	})
	if err != nil {
		return fileDiff{}, false, nil
	}
	return d, true, nil
}

// errFileChanged: a file changed while a staged replacement read it.
var errFileChanged = errors.New("the table file changed while it was applied")

// fileWalk walks the names of f that keep selects (skimTableNames: host
// and raw are valid during the call only), checking that f still holds
// the content whose hash is sum.
func fileWalk(f io.ReadSeeker, sum [sha256.Size]byte, keep func(host string, raw []byte) bool) func(each func(host string, raw []byte) error) error {
	return func(each func(host string, raw []byte) error) error {
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return err
		}
		got, err := skimTableNames(f, func(host string, raw []byte) error {
			if !keep(host, raw) {
				return nil
			}
			return each(host, raw)
		})
		if err == nil && got != sum {
			err = errFileChanged
		}
		return err
	}
}
