package ociimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// dockerManifest is one entry of the manifest.json that `docker load` and
// crane's tarball reader use.
type dockerManifest struct {
	Config   string
	RepoTags []string
	Layers   []string
}

// Layout is a built index: the files of an OCI image layout by path.
type Layout struct {
	files  map[string][]byte
	digest string
}

// Digest is the digest of what index.json points at: the image index (or,
// with one platform, the manifest) a registry would serve for the tag.
func (l *Layout) Digest() string { return l.digest }

// Files returns the layout's paths in order.
func (l *Layout) Files() []string {
	paths := make([]string, 0, len(l.files))
	for p := range l.files {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	return paths
}

// File returns the content of one path of the layout, or nil.
func (l *Layout) File(path string) []byte { return l.files[path] }

// Build assembles the blobs of ix with go-containerregistry (empty base,
// one appended layer, configs and manifests marshalled by the library).
// With one platform index.json points at its manifest, as `docker save`
// writes it; with more, at an image index listing one manifest per
// platform. A docker manifest.json names the first image, for `docker load`
// and `crane push` of the archive (both load one platform from it; the
// layout directory carries them all).
func (ix Index) Build() (*Layout, error) {
	if err := ix.check(); err != nil {
		return nil, err
	}
	created := ix.Created
	if created.IsZero() {
		created = time.Unix(0, 0)
	}
	created = created.UTC().Truncate(time.Second)
	l := &Layout{files: map[string][]byte{}}
	var adds []mutate.IndexAddendum
	for _, img := range ix.Images {
		im, err := ix.image(img, created)
		if err != nil {
			return nil, fmt.Errorf("image %s %s: %w", ix.Name, img.Platform, err)
		}
		if err := l.addImage(im); err != nil {
			return nil, fmt.Errorf("image %s %s: %w", ix.Name, img.Platform, err)
		}
		adds = append(adds, mutate.IndexAddendum{Add: im, Descriptor: v1.Descriptor{
			Platform: &v1.Platform{OS: img.Platform.OS, Architecture: img.Platform.Architecture}}})
	}
	var top partial.Describable = adds[0].Add
	if len(adds) > 1 {
		top = mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), adds...)
	}
	desc, err := partial.Descriptor(top)
	if err != nil {
		return nil, err
	}
	if len(adds) == 1 {
		desc.Platform = adds[0].Descriptor.Platform
	} else if err := l.addRaw(top.(v1.ImageIndex).RawManifest); err != nil {
		return nil, err
	}
	l.digest = desc.Digest.String()
	desc.Annotations = map[string]string{AnnotationContainerName: ix.Name, AnnotationRefName: ix.Tag()}
	index, err := json.Marshal(v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex, Manifests: []v1.Descriptor{*desc}})
	if err != nil {
		return nil, err
	}
	l.files["index.json"] = index
	l.files["oci-layout"] = []byte(`{"imageLayoutVersion":"1.0.0"}`)
	first := adds[0].Add.(v1.Image)
	cfgName, err := first.ConfigName()
	if err != nil {
		return nil, err
	}
	layers, err := first.Layers()
	if err != nil {
		return nil, err
	}
	layerDigest, err := layers[0].Digest()
	if err != nil {
		return nil, err
	}
	docker := []dockerManifest{{Config: blobPath(cfgName.String()), RepoTags: []string{ix.Name},
		Layers: []string{blobPath(layerDigest.String())}}}
	if l.files["manifest.json"], err = json.Marshal(docker); err != nil {
		return nil, err
	}
	return l, nil
}

// image is one platform's image: its files as one layer on an empty base.
func (ix Index) image(img Image, created time.Time) (v1.Image, error) {
	raw, err := layer(img.Files, created)
	if err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	lyr := static.NewLayer(raw, types.OCIUncompressedLayer)
	if ix.Gzip {
		// The library's gzip writes no name and no time: the output
		// depends on the input alone (and the Go version's compressor).
		lyr, err = tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(raw)), nil },
			tarball.WithCompressionLevel(gzip.BestCompression), tarball.WithMediaType(types.OCILayer))
		if err != nil {
			return nil, fmt.Errorf("compress layer: %w", err)
		}
	}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	base, err = mutate.ConfigFile(base, &v1.ConfigFile{Created: v1.Time{Time: created},
		OS: img.Platform.OS, Architecture: img.Platform.Architecture, Config: img.Config,
		RootFS: v1.RootFS{Type: "layers"}})
	if err != nil {
		return nil, err
	}
	return mutate.Append(base, mutate.Addendum{Layer: lyr, History: v1.History{Created: v1.Time{Time: created}}})
}

// addImage stores an image's manifest, config and layers as blobs.
func (l *Layout) addImage(im v1.Image) error {
	if err := l.addRaw(im.RawManifest); err != nil {
		return err
	}
	if err := l.addRaw(im.RawConfigFile); err != nil {
		return err
	}
	layers, err := im.Layers()
	if err != nil {
		return err
	}
	for _, lyr := range layers {
		rc, err := lyr.Compressed()
		if err != nil {
			return err
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			return err
		}
		if err := l.addRaw(func() ([]byte, error) { return b, nil }); err != nil {
			return err
		}
	}
	return nil
}

func (l *Layout) addRaw(raw func() ([]byte, error)) error {
	b, err := raw()
	if err != nil {
		return err
	}
	h, _, err := v1.SHA256(bytes.NewReader(b))
	if err != nil {
		return err
	}
	l.files[blobPath(h.String())] = b
	return nil
}

// WriteDir writes the layout into dir (created if needed). Blobs already
// there are kept, as in any OCI layout; index.json is replaced.
func (l *Layout) WriteDir(dir string) error {
	for _, p := range l.Files() {
		dst := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return fmt.Errorf("write layout: %w", err)
		}
		if err := os.WriteFile(dst, l.files[p], 0o644); err != nil {
			return fmt.Errorf("write layout: %w", err)
		}
	}
	return nil
}

// WriteArchive writes the layout as one tar stream, entries in path order
// with fixed metadata, so the archive itself is reproducible too.
// go-containerregistry writes docker archives (tarball.Write) but no OCI
// layout as a tar, which is what carries every platform to `ctr import`.
func (l *Layout) WriteArchive(w io.Writer) error {
	tw := tar.NewWriter(w)
	dirs := map[string]bool{}
	for _, p := range l.Files() {
		for d := filepath.Dir(p); d != "." && !dirs[d]; d = filepath.Dir(d) {
			dirs[d] = true
		}
	}
	var names []string
	for d := range dirs {
		names = append(names, d+"/")
	}
	names = append(names, l.Files()...)
	slices.Sort(names)
	for _, name := range names {
		h := &tar.Header{Name: name, ModTime: time.Unix(0, 0), Typeflag: tar.TypeDir, Mode: 0o755}
		data, isFile := l.files[name]
		if isFile {
			h.Typeflag, h.Mode, h.Size = tar.TypeReg, 0o644, int64(len(data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return fmt.Errorf("write archive: %w", err)
		}
		if isFile {
			if _, err := tw.Write(data); err != nil {
				return fmt.Errorf("write archive: %w", err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("write archive: %w", err)
	}
	return nil
}

// WriteArchiveFile writes the archive to path.
func (l *Layout) WriteArchiveFile(path string) error {
	var buf bytes.Buffer
	if err := l.WriteArchive(&buf); err != nil {
		return err
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write archive: %w", err)
	}
	return nil
}

// blobPath is where a digest's blob lives in a layout.
func blobPath(digest string) string {
	return "blobs/sha256/" + digest[len("sha256:"):]
}
