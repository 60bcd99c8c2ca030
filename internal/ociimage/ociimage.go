// Package ociimage writes container images from files on this machine, with
// no base image, no registry and no daemon: each platform's image is one
// layer, and the set is written as an OCI image layout (a directory, or the
// same files as one tar archive) that `ctr images import`, `docker load`
// and `crane push` accept.
//
// Images, configs, manifests and the index are assembled with
// go-containerregistry (empty base, mutate, static and tarball layers); this
// package writes what the library does not: the layer's tar from a list of
// files, and the layout as one tar archive.
//
// The output is reproducible: the same inputs give byte-identical blobs and
// so the same digests. Tar entries are sorted, owned by 0:0, stamped with
// one fixed time, and carry no user or group names; the configs carry the
// same fixed time; JSON is marshalled from structs (fixed field order);
// gzip writes no name and no time.
package ociimage

import (
	"fmt"
	"path"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// Annotations read by the importers: containerd names an imported image
// after io.containerd.image.name, and the OCI ref.name is the tag (ctr
// import --base-name and skopeo's oci: transport use it).
const (
	AnnotationRefName       = "org.opencontainers.image.ref.name"
	AnnotationContainerName = "io.containerd.image.name"
)

// Platform is an image's os and architecture, as in "linux/arm64".
type Platform struct {
	OS           string `json:"os"`
	Architecture string `json:"architecture"`
}

func (p Platform) String() string { return p.OS + "/" + p.Architecture }

// ParsePlatform reads "os/arch".
func ParsePlatform(s string) (Platform, error) {
	osName, arch, ok := strings.Cut(s, "/")
	if !ok || osName == "" || arch == "" || strings.Contains(arch, "/") {
		return Platform{}, fmt.Errorf("platform %q: want os/arch, such as linux/amd64", s)
	}
	return Platform{OS: osName, Architecture: arch}, nil
}

// File is one entry of an image's layer.
type File struct {
	// Path inside the image, absolute ("/usr/local/bin/meshdns").
	Path string
	// Data is a regular file's content.
	Data []byte
	// Mode is the permission bits; zero means 0o644 for files and 0o755
	// for directories.
	Mode int64
	// Link makes the entry a symlink to Link (Data is ignored).
	Link string
	// Dir makes the entry a directory (Data is ignored). Parents of every
	// entry are added as 0o755 directories without being listed.
	Dir bool
}

// Config is the part of the image configuration a runtime uses to start a
// container: User ("uid:gid", numeric, so no /etc/passwd lookup is needed;
// empty means root), Env, Entrypoint, Cmd, WorkingDir, Labels.
type Config = v1.Config

// Image is one platform's image.
type Image struct {
	Platform Platform
	Files    []File
	Config   Config
}

// Index is a set of images under one name, one per platform.
type Index struct {
	// Name is the full reference the images are imported as,
	// "ghcr.io/meshdns/meshdns:v0.1.0"; its tag becomes the ref.name.
	Name   string
	Images []Image
	// Created stamps every tar entry and the configs; the zero value means
	// the Unix epoch. Pass SOURCE_DATE_EPOCH for a meaningful date that is
	// still reproducible.
	Created time.Time
	// Gzip compresses the layers (what registries store); uncompressed
	// layers are faster to write and import locally.
	Gzip bool
}

// Tag returns the tag of Name ("latest" when it has none).
func (ix Index) Tag() string {
	name := ix.Name
	if i := strings.LastIndex(name, "@"); i >= 0 {
		name = name[:i]
	}
	if i := strings.LastIndex(name, ":"); i > strings.LastIndex(name, "/") {
		return name[i+1:]
	}
	return "latest"
}

func (ix Index) check() error {
	if ix.Name == "" {
		return fmt.Errorf("image index: no name")
	}
	if len(ix.Images) == 0 {
		return fmt.Errorf("image %s: no platform", ix.Name)
	}
	seen := map[Platform]bool{}
	for _, img := range ix.Images {
		if seen[img.Platform] {
			return fmt.Errorf("image %s: platform %s twice", ix.Name, img.Platform)
		}
		seen[img.Platform] = true
		for _, f := range img.Files {
			if !path.IsAbs(f.Path) || path.Clean(f.Path) != f.Path || f.Path == "/" {
				return fmt.Errorf("image %s %s: file path %q must be absolute and clean", ix.Name, img.Platform, f.Path)
			}
		}
	}
	return nil
}
