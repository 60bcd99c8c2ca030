package nodetest

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"time"
)

// Image is a container image built from files on this machine, with no
// base image and no registry: a single uncompressed layer in an OCI
// archive, which `ctr images import` takes.
type Image struct {
	// Name is the reference pods use, localhost/<name>:test.
	Name string
	// Files maps paths inside the image to files on this machine, copied
	// with mode 0755 (test images hold static binaries).
	Files map[string]string
	// Links maps paths inside the image to symlink targets.
	Links map[string]string
	// Entrypoint and Cmd of the image config.
	Entrypoint, Cmd []string
	// User is the image config's user, "uid:gid"; empty for root.
	User string
}

// Ref is the image reference pods use.
func (img Image) Ref() string { return "localhost/" + img.Name + ":test" }

// archive writes the image as an OCI archive to path.
func (img Image) archive(path string) error {
	layer, err := img.layer()
	if err != nil {
		return err
	}
	layerDigest := digest(layer)
	config, err := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"config": map[string]any{
			"Entrypoint": img.Entrypoint, "Cmd": img.Cmd, "User": img.User,
			"Env": []string{"PATH=/bin:/usr/bin:/usr/sbin:/sbin"},
		},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{layerDigest}},
	})
	if err != nil {
		return err
	}
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        descriptor("application/vnd.oci.image.config.v1+json", config),
		"layers":        []any{descriptor("application/vnd.oci.image.layer.v1.tar", layer)},
	})
	if err != nil {
		return err
	}
	md := descriptor("application/vnd.oci.image.manifest.v1+json", manifest)
	md["annotations"] = map[string]string{"org.opencontainers.image.ref.name": "test"}
	index, err := json.Marshal(map[string]any{"schemaVersion": 2, "manifests": []any{md}})
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	entries := []struct {
		name string
		data []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", index},
		{blobPath(config), config},
		{blobPath(manifest), manifest},
		{blobPath(layer), layer},
	}
	for _, e := range entries {
		if err := writeFile(tw, e.name, e.data, 0o644); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

// layer is the tar of the image's files, in name order.
func (img Image) layer() ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	var names []string
	for name := range img.Files {
		names = append(names, name)
	}
	for name := range img.Links {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		for d := filepath.Dir(name); d != "/" && d != "." && !dirs[d]; d = filepath.Dir(d) {
			dirs[d] = true
		}
	}
	var dirNames []string
	for d := range dirs {
		dirNames = append(dirNames, d)
	}
	sort.Strings(dirNames)
	for _, d := range append(dirNames, "/tmp") {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d[1:] + "/", Mode: 0o755, ModTime: time.Unix(0, 0)}); err != nil {
			return nil, err
		}
	}
	for _, name := range names {
		if target, ok := img.Links[name]; ok {
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: name[1:], Linkname: target, ModTime: time.Unix(0, 0)}); err != nil {
				return nil, err
			}
			continue
		}
		b, err := os.ReadFile(img.Files[name])
		if err != nil {
			return nil, err
		}
		if err := writeFile(tw, name[1:], b, 0o755); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func writeFile(tw *tar.Writer, name string, data []byte, mode int64) error {
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Size: int64(len(data)), Mode: mode, ModTime: time.Unix(0, 0)}); err != nil {
		return err
	}
	_, err := tw.Write(data)
	return err
}

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func blobPath(b []byte) string {
	sum := sha256.Sum256(b)
	return "blobs/sha256/" + hex.EncodeToString(sum[:])
}

func descriptor(mediaType string, b []byte) map[string]any {
	return map[string]any{"mediaType": mediaType, "digest": digest(b), "size": len(b)}
}

// LoadImage builds img and imports it into the node's containerd, where
// pods with imagePullPolicy Never find it.
func (n *Node) LoadImage(img Image) error {
	path := filepath.Join(n.Dir, "images", img.Name+".tar")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if err := img.archive(path); err != nil {
		return fmt.Errorf("image %s: %w", img.Name, err)
	}
	out, err := exec.Command("ctr", "--address", n.socket(), "-n", "k8s.io", "images", "import",
		"--base-name", "localhost/"+img.Name, path).CombinedOutput()
	if err != nil {
		return fmt.Errorf("import image %s: %v: %s", img.Name, err, out)
	}
	return nil
}
