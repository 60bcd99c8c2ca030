// Command meshdns is the one binary of meshdns: the per-pod DNS agent, the
// control plane, and the iptables helper of the init container.
//
// Built with -tags agentonly (bin/meshdns-agent) it carries only the agent
// and version commands: the sidecar's binary, without the control plane,
// webhook, Kubernetes client code and the init container's iptables
// command (internal/archtest checks).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
)

// command is one subcommand. run parses args itself so each subcommand owns
// its flag set (and its README section).
type command struct {
	summary string
	// usage, when set, replaces "usage: meshdns <name> [flags]" and the
	// summary at the top of --help.
	usage string
	run   func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

// commands is filled by the init functions of the subcommand files.
var commands = map[string]command{}

// personalities are the programs the binary is when called by their name
// (argv[0]), filled like commands; each returns its exit status.
var personalities = map[string]func(ctx context.Context, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) int{}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// Called by another name (the CNI plugin), the binary speaks that
	// program's protocol instead of subcommands.
	if prog, ok := personalities[filepath.Base(os.Args[0])]; ok {
		code := prog(ctx, os.Getenv, os.Stdin, os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run runs the command line and returns the exit status, as the tools
// meshdns sits beside do: 0 on success and for --help, 2 for a mistake in
// the command line (one line saying what, and where to read more), 1 for
// anything that failed while running.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	err := dispatch(ctx, args, stdout, stderr)
	var ue *usageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		name := "meshdns"
		if ue.cmd != "" {
			name += " " + ue.cmd
		}
		fmt.Fprintf(stderr, "%s: %v\nRun '%s --help' for usage.\n", name, ue.err, name)
		return 2
	default:
		fmt.Fprintf(stderr, "meshdns: %v\n", err)
		return 1
	}
}

// usageError is a mistake in the command line: an unknown command or
// flag, a flag value out of range, flags that exclude each other.
type usageError struct {
	cmd string // the subcommand, "" for meshdns itself
	err error
}

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// usagef returns a usageError; dispatch fills in the subcommand.
func usagef(format string, args ...any) error {
	return &usageError{err: fmt.Errorf(format, args...)}
}

func dispatch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usagef("no command given")
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		if len(args) > 1 {
			if c, ok := commands[args[1]]; ok {
				return c.run(ctx, []string{"--help"}, stdout, stderr)
			}
			return usagef("unknown command %q", args[1])
		}
		usage(stdout)
		return nil
	case "-version", "--version":
		return printVersion(stdout)
	}
	c, ok := commands[args[0]]
	if !ok {
		if strings.HasPrefix(args[0], "-") {
			return usagef("flag %s given before the command", args[0])
		}
		return usagef("unknown command %q", args[0])
	}
	err := c.run(ctx, args[1:], stdout, stderr)
	var ue *usageError
	if errors.As(err, &ue) && ue.cmd == "" {
		ue.cmd = args[0]
	}
	return err
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: meshdns <command> [flags]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-13s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'meshdns <command> --help' for the flags of a command; 'meshdns --version' for the version.")
}
