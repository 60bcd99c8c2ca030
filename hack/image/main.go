// Command image writes the meshdns container image: the static binaries
// built by `make image` (meshdns and the sidecar's meshdns-agent), one image
// per platform, from an empty base, as an OCI layout directory and an
// archive of it that
// `docker load`, `ctr images import` and `crane push` accept. It needs no
// registry and no container daemon, and the same binaries give the same
// digest.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/meshdns/meshdns/internal/ociimage"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

// binaryFlags collects -binary os/arch=path.
type binaryFlags []string

func (b *binaryFlags) String() string     { return strings.Join(*b, ",") }
func (b *binaryFlags) Set(s string) error { *b = append(*b, s); return nil }

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var binaries, agents binaryFlags
	fs.Var(&binaries, "binary", "os/arch=path of a static meshdns binary (repeatable; the first is the one docker load takes)")
	fs.Var(&agents, "agent-binary", "os/arch=path of the static meshdns-agent binary (make build's agent build) of a platform of -binary, which the injected sidecar runs (repeatable)")
	var (
		name     = fs.String("name", "ghcr.io/meshdns/meshdns:dev", "image reference, repository:version")
		revision = fs.String("revision", "", "source revision for the image labels")
		license  = fs.String("license", "LICENSE", "license file copied into the image")
		layout   = fs.String("layout", "bin/image/oci", "OCI layout directory to write")
		archive  = fs.String("archive", "bin/image/meshdns.tar", "archive (tar of the layout) to write")
		gz       = fs.Bool("gzip", true, "compress the layers")
	)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if len(binaries) == 0 {
		return fmt.Errorf("no -binary given")
	}
	created, err := sourceDate(os.Getenv("SOURCE_DATE_EPOCH"))
	if err != nil {
		return err
	}
	lic, err := os.ReadFile(*license)
	if err != nil {
		return fmt.Errorf("read license: %w", err)
	}
	spec := ociimage.Meshdns{Name: *name, Revision: *revision, License: lic, Created: created, Gzip: *gz}
	agentFiles := map[string]string{} // platform -> path
	for _, a := range agents {
		plat, path, ok := strings.Cut(a, "=")
		if !ok {
			return fmt.Errorf("-agent-binary %q: want os/arch=path", a)
		}
		agentFiles[plat] = path
	}
	for _, b := range binaries {
		plat, path, ok := strings.Cut(b, "=")
		if !ok {
			return fmt.Errorf("-binary %q: want os/arch=path", b)
		}
		p, err := ociimage.ParsePlatform(plat)
		if err != nil {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("read binary: %w", err)
		}
		// The injection template runs meshdns-agent in the sidecar: an
		// image without it would give every injected pod an agent that
		// cannot start.
		agentPath, ok := agentFiles[plat]
		if !ok {
			return fmt.Errorf("-binary %s has no -agent-binary %s=PATH (the sidecar's build)", plat, plat)
		}
		delete(agentFiles, plat)
		agent, err := os.ReadFile(agentPath)
		if err != nil {
			return fmt.Errorf("read agent binary: %w", err)
		}
		spec.Binaries = append(spec.Binaries, ociimage.Binary{Platform: p, Data: data, Agent: agent})
	}
	for plat := range agentFiles {
		return fmt.Errorf("-agent-binary %s has no -binary %s=PATH", plat, plat)
	}
	l, err := spec.Index().Build()
	if err != nil {
		return err
	}
	if err := os.RemoveAll(*layout); err != nil {
		return fmt.Errorf("clear layout: %w", err)
	}
	if err := l.WriteDir(*layout); err != nil {
		return err
	}
	if err := l.WriteArchiveFile(*archive); err != nil {
		return err
	}
	st, err := os.Stat(*archive)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s %s\nlayout %s\narchive %s (%.1f MiB)\n", *name, l.Digest(), *layout, *archive, float64(st.Size())/(1<<20))
	return nil
}

// sourceDate reads SOURCE_DATE_EPOCH (reproducible-builds.org); empty means
// the Unix epoch.
func sourceDate(s string) (time.Time, error) {
	if s == "" {
		return time.Unix(0, 0), nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH %q: not a number of seconds", s)
	}
	return time.Unix(n, 0), nil
}
