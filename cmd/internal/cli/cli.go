// Package cli is the command line both binaries share: subcommands
// registered by name, their flags (also read from MESHDNS_<FLAG>), usage
// errors with exit status 2, --help and the version command.
//
// cmd/meshdns registers every command; cmd/meshdns-agent, the sidecar's
// binary, only the agent (cmd/internal/agentcmd). Each main names itself
// (SetProgram) and registers its commands from init functions, then calls
// Main.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
)

// Command is one subcommand. Run parses args itself so each subcommand
// owns its flag set (and its README section).
type Command struct {
	Summary string
	// Usage, when set, replaces "usage: <program> <name> [flags]" and the
	// summary at the top of --help.
	Usage string
	Run   func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

// commands are the commands of this binary, filled by Register from the
// init functions of its main package (and version, by this package).
var commands = map[string]Command{}

// program is the binary's name in usage, error and version lines; its
// main package sets it with SetProgram.
var program = "meshdns"

// SetProgram names the binary in what the command line prints: usage,
// usage errors, failures and the version line ("meshdns-agent v1.2.3
// ..."). Only the text for people changes: the version the agent reports
// to the control plane and on /metrics is BuildInfo's, without a name.
// Call it from an init function, before Run.
func SetProgram(name string) { program = name }

// Register makes c the command name of this binary. A command registered
// before under the same name is replaced: a file of the main package may
// wrap another's command (Lookup, then Register).
func Register(name string, c Command) { commands[name] = c }

// Lookup returns the command registered as name.
func Lookup(name string) (Command, bool) {
	c, ok := commands[name]
	return c, ok
}

// Main runs the command line of the process and exits with its status.
// version and revision are the main package's build stamps (see Stamp).
func Main(version, revision string) {
	Stamp(version, revision)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Run runs the command line and returns the exit status, as the tools
// meshdns sits beside do: 0 on success and for --help, 2 for a mistake in
// the command line (one line saying what, and where to read more), 1 for
// anything that failed while running.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	err := Dispatch(ctx, args, stdout, stderr)
	var ue *UsageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		name := program
		if ue.Cmd != "" {
			name += " " + ue.Cmd
		}
		fmt.Fprintf(stderr, "%s: %v\nRun '%s --help' for usage.\n", name, ue.Err, name)
		return 2
	default:
		fmt.Fprintf(stderr, "%s: %v\n", program, err)
		return 1
	}
}

// UsageError is a mistake in the command line: an unknown command or
// flag, a flag value out of range, flags that exclude each other.
type UsageError struct {
	Cmd string // the subcommand, "" for the program itself
	Err error
}

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// Usagef returns a UsageError; Dispatch fills in the subcommand.
func Usagef(format string, args ...any) error {
	return &UsageError{Err: fmt.Errorf(format, args...)}
}

// Dispatch runs the command args name and returns its error; Run turns
// that into the exit status.
func Dispatch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return Usagef("no command given")
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		if len(args) > 1 {
			if c, ok := commands[args[1]]; ok {
				return c.Run(ctx, []string{"--help"}, stdout, stderr)
			}
			return Usagef("unknown command %q", args[1])
		}
		usage(stdout)
		return nil
	case "-version", "--version":
		return printVersion(stdout)
	}
	c, ok := commands[args[0]]
	if !ok {
		if strings.HasPrefix(args[0], "-") {
			return Usagef("flag %s given before the command", args[0])
		}
		return Usagef("unknown command %q", args[0])
	}
	err := c.Run(ctx, args[1:], stdout, stderr)
	var ue *UsageError
	if errors.As(err, &ue) && ue.Cmd == "" {
		ue.Cmd = args[0]
	}
	return err
}

func usage(w io.Writer) {
	fmt.Fprintf(w, "usage: %s <command> [flags]\n\ncommands:\n", program)
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-13s %s\n", n, commands[n].Summary)
	}
	fmt.Fprintf(w, "\nRun '%s <command> --help' for the flags of a command; '%s --version' for the version.\n", program, program)
}
