package ociimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// Descriptor points at a blob (OCI image spec, descriptor.md).
type Descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Platform    *Platform         `json:"platform,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// Manifest is one platform's image manifest.
type Manifest struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Config        Descriptor   `json:"config"`
	Layers        []Descriptor `json:"layers"`
}

// IndexJSON is an image index: index.json, or a multi-platform image.
type IndexJSON struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Manifests     []Descriptor `json:"manifests"`
}

// ImageConfig is the image configuration blob.
type ImageConfig struct {
	Created      string `json:"created"`
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
	Config       Config `json:"config"`
	RootFS       struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
}

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

// Build assembles the blobs of ix. With one platform index.json points at
// its manifest, as `docker save` writes it; with more, at an image index
// listing one manifest per platform. A docker manifest.json names the first
// image, for `docker load` and `crane push` of the archive (both load one
// platform from it; the layout directory carries them all).
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
	var manifests []Descriptor
	var docker []dockerManifest
	for i, img := range ix.Images {
		raw, err := layer(img.Files, created)
		if err != nil {
			return nil, fmt.Errorf("image %s %s: layer: %w", ix.Name, img.Platform, err)
		}
		diffID := digestOf(raw)
		layerBlob, layerType := raw, MediaTypeLayer
		if ix.Gzip {
			if layerBlob, err = gzipped(raw); err != nil {
				return nil, fmt.Errorf("image %s %s: compress layer: %w", ix.Name, img.Platform, err)
			}
			layerType = MediaTypeLayerGz
		}
		cfg := ImageConfig{Created: created.Format(time.RFC3339), Architecture: img.Platform.Architecture,
			OS: img.Platform.OS, Config: img.Config}
		cfg.RootFS.Type, cfg.RootFS.DiffIDs = "layers", []string{diffID}
		cfgDesc, err := l.addJSON(MediaTypeConfig, cfg)
		if err != nil {
			return nil, err
		}
		layerDesc := l.add(layerType, layerBlob)
		m := Manifest{SchemaVersion: 2, MediaType: MediaTypeManifest, Config: cfgDesc, Layers: []Descriptor{layerDesc}}
		md, err := l.addJSON(MediaTypeManifest, m)
		if err != nil {
			return nil, err
		}
		p := img.Platform
		md.Platform = &p
		manifests = append(manifests, md)
		if i == 0 {
			docker = append(docker, dockerManifest{Config: blobPath(cfgDesc.Digest), RepoTags: []string{ix.Name},
				Layers: []string{blobPath(layerDesc.Digest)}})
		}
	}
	top := manifests[0]
	if len(manifests) > 1 {
		var err error
		top, err = l.addJSON(MediaTypeIndex, IndexJSON{SchemaVersion: 2, MediaType: MediaTypeIndex, Manifests: manifests})
		if err != nil {
			return nil, err
		}
	}
	l.digest = top.Digest
	top.Annotations = map[string]string{AnnotationContainerName: ix.Name, AnnotationRefName: ix.Tag()}
	index, err := json.Marshal(IndexJSON{SchemaVersion: 2, MediaType: MediaTypeIndex, Manifests: []Descriptor{top}})
	if err != nil {
		return nil, err
	}
	l.files["index.json"] = index
	l.files["oci-layout"] = []byte(`{"imageLayoutVersion":"1.0.0"}`)
	if l.files["manifest.json"], err = json.Marshal(docker); err != nil {
		return nil, err
	}
	return l, nil
}

// add stores a blob and returns its descriptor.
func (l *Layout) add(mediaType string, b []byte) Descriptor {
	d := Descriptor{MediaType: mediaType, Digest: digestOf(b), Size: int64(len(b))}
	l.files[blobPath(d.Digest)] = b
	return d
}

func (l *Layout) addJSON(mediaType string, v any) (Descriptor, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return Descriptor{}, fmt.Errorf("marshal %s: %w", mediaType, err)
	}
	return l.add(mediaType, b), nil
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

func gzipped(b []byte) ([]byte, error) {
	var buf bytes.Buffer
	// No name and a zero ModTime in the header: the output depends on the
	// input alone (and the Go version's compressor).
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(b); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// blobPath is where a digest's blob lives in a layout.
func blobPath(digest string) string {
	return "blobs/sha256/" + digest[len("sha256:"):]
}
