// Command meshdns-agent is the sidecar's binary: the agent command of
// meshdns (cmd/internal/agentcmd) and version, nothing else. Every pod
// maps the pages of what its binary links and initialises, so it leaves
// out what only the full binary (cmd/meshdns) runs: the control plane and
// webhook, Kubernetes client code, the init container's iptables command
// and its nftables backend (internal/archtest checks what it links). Build
// it as the Makefile does: CGO_ENABLED=0 and -ldflags "-s -w".
package main

import (
	"github.com/meshdns/meshdns/cmd/internal/agentcmd"
	"github.com/meshdns/meshdns/cmd/internal/cli"
)

// version and revision are set at build time by the Makefile: -ldflags
// "-X main.version=v1.2.3 -X main.revision=<commit>" (see cli.Stamp).
var version, revision string

func init() {
	cli.SetProgram("meshdns-agent")
	cli.Register("agent", agentcmd.Command)
}

func main() {
	cli.Main(version, revision)
}
