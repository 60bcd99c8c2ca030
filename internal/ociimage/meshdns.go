package ociimage

import "time"

// Binary is the meshdns binaries of one platform.
type Binary struct {
	Platform Platform
	Data     []byte // meshdns, every command
	// Agent is the sidecar's build of the same command (make build's
	// bin/meshdns-agent: agent and version only), or nil for an image
	// without it.
	Agent []byte
}

// Meshdns is what goes into the meshdns image: `make image` (hack/image)
// and the real-node tests build the image from it, so both run the same
// files and configuration.
type Meshdns struct {
	Name     string // repository:version
	Revision string // or ""
	License  []byte
	Binaries []Binary
	Created  time.Time
	Gzip     bool
}

// Paths and ids inside the meshdns image.
const (
	// MeshdnsBinary is the binary's path, the entrypoint.
	MeshdnsBinary = "/usr/local/bin/meshdns"
	// AgentBinary is the sidecar's smaller build, which the injected agent
	// container runs: every pod maps its pages.
	AgentBinary = "/usr/local/bin/meshdns-agent"
	// nonroot is the default user (distroless's convention). The control
	// plane runs as it; the injected sidecar sets its own uid (the one the
	// capture rules exempt), and the init container runs as root with
	// NET_ADMIN and NET_RAW only.
	nonroot = "65532:65532"
)

// Index returns the image set: one image per binary, holding the binary,
// the license, the passwd and group entries of root and nonroot, and an
// empty /tmp. There is no shell and no other program: the init
// container's `meshdns iptables apply` (with its native nftables backend)
// and the control plane are the one meshdns binary; the sidecar's agent is
// meshdns-agent, the same command built without what only the others need.
func (s Meshdns) Index() Index {
	ix := Index{Name: s.Name, Created: s.Created, Gzip: s.Gzip}
	version := ix.Tag()
	labels := map[string]string{
		"org.opencontainers.image.title":    "meshdns",
		"org.opencontainers.image.version":  version,
		"org.opencontainers.image.licenses": "Apache-2.0",
		"org.opencontainers.image.source":   "https://github.com/meshdns/meshdns",
	}
	if s.Revision != "" {
		labels["org.opencontainers.image.revision"] = s.Revision
	}
	for _, b := range s.Binaries {
		files := []File{{Path: MeshdnsBinary, Data: b.Data, Mode: 0o755}}
		if b.Agent != nil {
			files = append(files, File{Path: AgentBinary, Data: b.Agent, Mode: 0o755})
		}
		ix.Images = append(ix.Images, Image{
			Platform: b.Platform,
			Files: append(files, []File{
				{Path: "/usr/share/doc/meshdns/LICENSE", Data: s.License},
				{Path: "/etc/passwd", Data: []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
				{Path: "/etc/group", Data: []byte("root:x:0:\nnonroot:x:65532:\n")},
				// The Go resolver reads it for the order of /etc/hosts and
				// DNS; without it, it guesses the same.
				{Path: "/etc/nsswitch.conf", Data: []byte("hosts: files dns\n")},
				{Path: "/tmp", Dir: true, Mode: 0o1777},
			}...),
			Config: Config{
				User:       nonroot,
				Env:        []string{"PATH=/usr/local/bin"},
				Entrypoint: []string{MeshdnsBinary},
				Labels:     labels,
			},
		})
	}
	return ix
}
