package nodetest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"

	"github.com/meshdns/meshdns/internal/ociimage"
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

// archive writes the image as an OCI archive to path: one uncompressed
// layer for this machine's architecture (ociimage writes it).
func (img Image) archive(path string) error {
	var files []ociimage.File
	for name, src := range img.Files {
		b, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		files = append(files, ociimage.File{Path: name, Data: b, Mode: 0o755})
	}
	for name, target := range img.Links {
		files = append(files, ociimage.File{Path: name, Link: target})
	}
	files = append(files, ociimage.File{Path: "/tmp", Dir: true, Mode: 0o1777})
	l, err := ociimage.Index{Name: img.Ref(), Images: []ociimage.Image{{
		Platform: ociimage.Platform{OS: "linux", Architecture: runtime.GOARCH},
		Files:    files,
		Config: ociimage.Config{Entrypoint: img.Entrypoint, Cmd: img.Cmd, User: img.User,
			Env: []string{"PATH=/bin:/usr/bin:/usr/sbin:/sbin"}},
	}}}.Build()
	if err != nil {
		return err
	}
	return l.WriteArchiveFile(path)
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

// ImportArchive imports an image archive built elsewhere (the project's
// `make image`: an OCI layout whose index names the image) into the
// node's containerd, for every platform it holds.
func (n *Node) ImportArchive(path string) error {
	out, err := exec.Command("ctr", "--address", n.socket(), "-n", "k8s.io", "images", "import", "--all-platforms", path).CombinedOutput()
	if err != nil {
		return fmt.Errorf("import %s: %v: %s", path, err, out)
	}
	return nil
}
