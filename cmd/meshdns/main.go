// Command meshdns is the full binary of meshdns: the per-pod DNS agent (as
// VMs run it), the control plane and webhook, the init container's
// iptables command, the CNI plugin and the operator's commands (status,
// top, validate, analyze, ...).
//
// The sidecar runs cmd/meshdns-agent instead: the same agent command
// (cmd/internal/agentcmd) and version, without the rest, whose pages every
// pod would otherwise map (internal/archtest checks what it links).
package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/meshdns/meshdns/cmd/internal/agentcmd"
	"github.com/meshdns/meshdns/cmd/internal/cli"
)

// version and revision are set at build time by the Makefile: -ldflags
// "-X main.version=v1.2.3 -X main.revision=<commit>" (see cli.Stamp).
var version, revision string

// The subcommand files register their commands from init functions.
func init() {
	cli.SetProgram("meshdns")
	cli.Register("agent", agentcmd.Command)
}

// personalities are the programs the binary is when called by their name
// (argv[0]), filled by init functions as the commands are; each returns
// its exit status.
var personalities = map[string]func(ctx context.Context, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) int{}

func main() {
	// Called by another name (the CNI plugin), the binary speaks that
	// program's protocol instead of subcommands.
	if prog, ok := personalities[filepath.Base(os.Args[0])]; ok {
		cli.Stamp(version, revision)
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := prog(ctx, os.Getenv, os.Stdin, os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	cli.Main(version, revision)
}
