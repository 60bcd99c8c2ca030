package ociimage

import (
	"archive/tar"
	"bytes"
	"path"
	"slices"
	"time"
)

// layer returns the uncompressed tar of files: parents first, then every
// path in byte order, all owned by 0:0 and stamped with mtime.
func layer(files []File, mtime time.Time) ([]byte, error) {
	byPath := map[string]File{}
	for _, f := range files {
		byPath[f.Path] = f
		for d := path.Dir(f.Path); d != "/"; d = path.Dir(d) {
			if _, ok := byPath[d]; !ok {
				byPath[d] = File{Path: d, Dir: true}
			}
		}
	}
	paths := make([]string, 0, len(byPath))
	for p := range byPath {
		paths = append(paths, p)
	}
	// Sorting the full paths puts every directory before its contents.
	slices.Sort(paths)

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range paths {
		f := byPath[p]
		h := &tar.Header{Name: p[1:], ModTime: mtime, Mode: f.Mode}
		switch {
		case f.Dir:
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
			if h.Mode == 0 {
				h.Mode = 0o755
			}
		case f.Link != "":
			h.Typeflag, h.Linkname, h.Mode = tar.TypeSymlink, f.Link, 0o777
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.Data))
			if h.Mode == 0 {
				h.Mode = 0o644
			}
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(f.Data); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
