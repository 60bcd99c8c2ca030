package ociimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

func testIndex(gz bool) Index {
	img := func(arch string) Image {
		return Image{
			Platform: Platform{OS: "linux", Architecture: arch},
			Files: []File{
				{Path: "/usr/local/bin/tool", Data: []byte("binary for " + arch), Mode: 0o755},
				{Path: "/etc/passwd", Data: []byte("root:x:0:0::/:/sbin/nologin\n")},
				{Path: "/tmp", Dir: true, Mode: 0o1777},
				{Path: "/usr/bin/tool", Link: "/usr/local/bin/tool"},
			},
			Config: Config{User: "65532:65532", Entrypoint: []string{"/usr/local/bin/tool"}, Env: []string{"PATH=/usr/local/bin"}},
		}
	}
	return Index{Name: "example.com/tool:v1.2.3", Images: []Image{img("amd64"), img("arm64")}, Gzip: gz}
}

// TestReproducible: building twice gives the same bytes, whatever order
// the files come in; a changed file changes the digest.
func TestReproducible(t *testing.T) {
	a, err := testIndex(true).Build()
	if err != nil {
		t.Fatal(err)
	}
	ix := testIndex(true)
	slices.Reverse(ix.Images[0].Files)
	b, err := ix.Build()
	if err != nil {
		t.Fatal(err)
	}
	if a.Digest() != b.Digest() {
		t.Errorf("digests differ: %s, %s", a.Digest(), b.Digest())
	}
	var wa, wb bytes.Buffer
	if err := a.WriteArchive(&wa); err != nil {
		t.Fatal(err)
	}
	if err := b.WriteArchive(&wb); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(wa.Bytes(), wb.Bytes()) {
		t.Error("archives differ")
	}
	ix = testIndex(true)
	ix.Images[1].Files[0].Data = []byte("another binary")
	c, err := ix.Build()
	if err != nil {
		t.Fatal(err)
	}
	if c.Digest() == a.Digest() {
		t.Error("a changed file kept the digest")
	}
}

// TestLayout walks the layout as an importer does, from index.json to the
// layers, checking every digest and size on the way.
func TestLayout(t *testing.T) {
	for _, gz := range []bool{false, true} {
		l, err := testIndex(gz).Build()
		if err != nil {
			t.Fatal(err)
		}
		var arch bytes.Buffer
		if err := l.WriteArchive(&arch); err != nil {
			t.Fatal(err)
		}
		files := untar(t, arch.Bytes())
		if diff := cmp.Diff(l.Files(), keys(files)); diff != "" {
			t.Errorf("archive entries (-layout +archive):\n%s", diff)
		}
		blob := func(d v1.Descriptor) []byte {
			t.Helper()
			b, ok := files[blobPath(d.Digest.String())]
			if !ok || int64(len(b)) != d.Size || digestOf(b) != d.Digest.String() {
				t.Fatalf("blob %s: missing or wrong size or digest", d.Digest)
			}
			return b
		}
		var top v1.IndexManifest
		mustJSON(t, files["index.json"], &top)
		if len(top.Manifests) != 1 || top.Manifests[0].MediaType != types.OCIImageIndex {
			t.Fatalf("index.json = %+v, want one image index", top)
		}
		if got := top.Manifests[0].Annotations; got[AnnotationContainerName] != "example.com/tool:v1.2.3" || got[AnnotationRefName] != "v1.2.3" {
			t.Errorf("annotations = %v", got)
		}
		if top.Manifests[0].Digest.String() != l.Digest() {
			t.Errorf("Digest() = %s, index.json points at %s", l.Digest(), top.Manifests[0].Digest)
		}
		var multi v1.IndexManifest
		mustJSON(t, blob(top.Manifests[0]), &multi)
		var plats []string
		for _, md := range multi.Manifests {
			plats = append(plats, md.Platform.String())
			var m v1.Manifest
			mustJSON(t, blob(md), &m)
			var cfg v1.ConfigFile
			mustJSON(t, blob(m.Config), &cfg)
			if cfg.Architecture != md.Platform.Architecture || cfg.Config.User != "65532:65532" || !cfg.Created.Time.Equal(time.Unix(0, 0)) {
				t.Errorf("config %+v", cfg)
			}
			layer := blob(m.Layers[0])
			if gz {
				if m.Layers[0].MediaType != types.OCILayer {
					t.Errorf("layer media type %s", m.Layers[0].MediaType)
				}
				zr, err := gzip.NewReader(bytes.NewReader(layer))
				if err != nil {
					t.Fatal(err)
				}
				if layer, err = io.ReadAll(zr); err != nil {
					t.Fatal(err)
				}
			}
			if digestOf(layer) != cfg.RootFS.DiffIDs[0].String() {
				t.Errorf("diff_id %s does not match the layer", cfg.RootFS.DiffIDs[0])
			}
			checkLayer(t, layer, md.Platform.Architecture)
		}
		if diff := cmp.Diff([]string{"linux/amd64", "linux/arm64"}, plats); diff != "" {
			t.Errorf("platforms (-want +got):\n%s", diff)
		}
		var docker []dockerManifest
		mustJSON(t, files["manifest.json"], &docker)
		if len(docker) != 1 || docker[0].RepoTags[0] != "example.com/tool:v1.2.3" || files[docker[0].Config] == nil || files[docker[0].Layers[0]] == nil {
			t.Errorf("manifest.json = %+v", docker)
		}
	}
}

// checkLayer compares the layer's entries with what the test put in.
func checkLayer(t *testing.T, layer []byte, arch string) {
	t.Helper()
	type entry struct {
		Name, Link string
		Type       byte
		Mode       int64
		Uid, Gid   int
		Data       string
		Mtime      time.Time
	}
	var got []entry
	tr := tar.NewReader(bytes.NewReader(layer))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		got = append(got, entry{Name: h.Name, Link: h.Linkname, Type: h.Typeflag, Mode: h.Mode, Uid: h.Uid, Gid: h.Gid, Data: string(b), Mtime: h.ModTime.UTC()})
	}
	epoch := time.Unix(0, 0).UTC()
	want := []entry{
		{Name: "etc/", Type: tar.TypeDir, Mode: 0o755, Mtime: epoch},
		{Name: "etc/passwd", Type: tar.TypeReg, Mode: 0o644, Data: "root:x:0:0::/:/sbin/nologin\n", Mtime: epoch},
		{Name: "tmp/", Type: tar.TypeDir, Mode: 0o1777, Mtime: epoch},
		{Name: "usr/", Type: tar.TypeDir, Mode: 0o755, Mtime: epoch},
		{Name: "usr/bin/", Type: tar.TypeDir, Mode: 0o755, Mtime: epoch},
		{Name: "usr/bin/tool", Type: tar.TypeSymlink, Link: "/usr/local/bin/tool", Mode: 0o777, Mtime: epoch},
		{Name: "usr/local/", Type: tar.TypeDir, Mode: 0o755, Mtime: epoch},
		{Name: "usr/local/bin/", Type: tar.TypeDir, Mode: 0o755, Mtime: epoch},
		{Name: "usr/local/bin/tool", Type: tar.TypeReg, Mode: 0o755, Data: "binary for " + arch, Mtime: epoch},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("layer %s (-want +got):\n%s", arch, diff)
	}
}

func TestSinglePlatform(t *testing.T) {
	ix := testIndex(false)
	ix.Images = ix.Images[:1]
	l, err := ix.Build()
	if err != nil {
		t.Fatal(err)
	}
	var top v1.IndexManifest
	mustJSON(t, l.File("index.json"), &top)
	if len(top.Manifests) != 1 || top.Manifests[0].MediaType != types.OCIManifestSchema1 || top.Manifests[0].Platform == nil {
		t.Errorf("index.json = %s, want the manifest itself", l.File("index.json"))
	}
}

func TestBuildErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		index Index
	}{
		{name: "no name", index: Index{Images: testIndex(false).Images}},
		{name: "no image", index: Index{Name: "x:1"}},
		{name: "platform twice", index: Index{Name: "x:1", Images: []Image{testIndex(false).Images[0], testIndex(false).Images[0]}}},
		{name: "relative path", index: Index{Name: "x:1", Images: []Image{{Platform: Platform{"linux", "amd64"}, Files: []File{{Path: "bin/x"}}}}}},
		{name: "unclean path", index: Index{Name: "x:1", Images: []Image{{Platform: Platform{"linux", "amd64"}, Files: []File{{Path: "/bin/../x"}}}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := tc.index.Build(); err == nil {
				t.Error("Build succeeded")
			}
		})
	}
}

func TestTagAndPlatform(t *testing.T) {
	for name, want := range map[string]string{"a/b:v1": "v1", "localhost:5000/b": "latest", "localhost:5000/b:t": "t", "b@sha256:00": "latest"} {
		if got := (Index{Name: name}).Tag(); got != want {
			t.Errorf("Tag(%q) = %q, want %q", name, got, want)
		}
	}
	if p, err := ParsePlatform("linux/arm64"); err != nil || p != (Platform{"linux", "arm64"}) {
		t.Errorf("ParsePlatform = %v, %v", p, err)
	}
	for _, bad := range []string{"linux", "linux/", "/arm64", "linux/arm/v7"} {
		if _, err := ParsePlatform(bad); err == nil {
			t.Errorf("ParsePlatform(%q) succeeded", bad)
		}
	}
}

func untar(t *testing.T, b []byte) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			out[h.Name], _ = io.ReadAll(tr)
		}
	}
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func mustJSON(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
}

func digestOf(b []byte) string {
	h, _, err := v1.SHA256(bytes.NewReader(b))
	if err != nil {
		panic(err)
	}
	return h.String()
}
