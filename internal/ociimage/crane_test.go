package ociimage

import (
	"path/filepath"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/validate"
)

// TestCraneReads opens the layout and the archive with go-containerregistry,
// the library behind crane: `crane push --index DIR` reads the layout with
// layout.ImageIndexFromPath, `crane push FILE` the archive with
// tarball.ImageFromPath (docker's manifest.json, as `docker load` does).
// validate reads every blob and checks digests, sizes and diff_ids.
func TestCraneReads(t *testing.T) {
	for _, gz := range []bool{false, true} {
		l, err := testIndex(gz).Build()
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		if err := l.WriteDir(filepath.Join(dir, "oci")); err != nil {
			t.Fatal(err)
		}
		top, err := layout.ImageIndexFromPath(filepath.Join(dir, "oci"))
		if err != nil {
			t.Fatal(err)
		}
		im, err := top.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		if len(im.Manifests) != 1 || im.Manifests[0].Digest.String() != l.Digest() {
			t.Fatalf("index.json: %+v, want one entry %s", im.Manifests, l.Digest())
		}
		idx, err := top.ImageIndex(im.Manifests[0].Digest)
		if err != nil {
			t.Fatal(err)
		}
		// go-containerregistry reads every layer of a layout as gzip (what
		// registries hold), so only the compressed layout, the one make
		// image writes, is validated here; the uncompressed one is what
		// nodetest imports into containerd.
		if err := validate.Index(idx); gz && err != nil {
			t.Errorf("the multi-platform index does not validate: %v", err)
		}
		children, err := idx.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		if n := len(children.Manifests); n != 2 {
			t.Errorf("%d platforms, want 2", n)
		}

		archive := filepath.Join(dir, "image.tar")
		if err := l.WriteArchiveFile(archive); err != nil {
			t.Fatal(err)
		}
		tag, err := name.NewTag("example.com/tool:v1.2.3")
		if err != nil {
			t.Fatal(err)
		}
		img, err := tarball.ImageFromPath(archive, &tag)
		if err != nil {
			t.Fatalf("gzip %v: tarball.ImageFromPath: %v", gz, err)
		}
		if err := validate.Image(img); err != nil {
			t.Errorf("gzip %v: the archive's image does not validate: %v", gz, err)
		}
		cfg, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Architecture != "amd64" || cfg.Config.User != "65532:65532" {
			t.Errorf("archive image config: %s %q", cfg.Architecture, cfg.Config.User)
		}
	}
}
