package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// ParseFlags parses args into fs, then fills every flag not given on the
// command line from the environment variable MESHDNS_<NAME> (upper case,
// dashes as underscores). extraEnv maps a flag name to further variables
// consulted after MESHDNS_<NAME>, such as POD_NAMESPACE from the downward API.
//
// --help prints the command's help to fs.Output() (set it to stdout) and
// returns flag.ErrHelp; a flag that does not parse, a stray argument, a
// bad environment value or a negative duration is a UsageError, reported
// in one line rather than with the whole flag list.
func ParseFlags(fs *flag.FlagSet, args []string, extraEnv map[string][]string) error {
	out := fs.Output()
	fs.Usage = func() {}
	fs.SetOutput(io.Discard)
	defer fs.SetOutput(out)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			PrintHelp(out, fs)
			return flag.ErrHelp
		}
		return &UsageError{Err: flagError(fs, err)}
	}
	if fs.NArg() > 0 {
		return Usagef("unexpected arguments: %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] || err != nil {
			return
		}
		names := append([]string{envName(f.Name)}, extraEnv[f.Name]...)
		for _, n := range names {
			v, ok := os.LookupEnv(n)
			if !ok {
				continue
			}
			if e := setFromEnv(f, v); e != nil {
				err = Usagef("environment variable %s=%q (--%s): %w", n, v, f.Name, e)
			}
			return
		}
	})
	if err != nil {
		return err
	}
	return noNegativeDurations(fs)
}

// PrintHelp is a command's --help: what it does, then its flags.
func PrintHelp(w io.Writer, fs *flag.FlagSet) {
	if c, ok := commands[fs.Name()]; ok && c.Usage != "" {
		fmt.Fprintf(w, "%s\n\n", c.Usage)
	} else {
		fmt.Fprintf(w, "usage: %s %s [flags]\n\n", program, fs.Name())
		if ok {
			fmt.Fprintf(w, "%s\n\n", c.Summary)
		}
	}
	fmt.Fprintln(w, "flags (each also read from MESHDNS_<FLAG_NAME>, e.g. --admin-addr from MESHDNS_ADMIN_ADDR):")
	fs.VisitAll(func(f *flag.Flag) {
		// flag.PrintDefaults spells flags with one dash; users and the
		// READMEs use two.
		arg, usage := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if arg != "" {
			line += " " + arg
		}
		line += "\n    \t" + strings.ReplaceAll(usage, "\n", "\n    \t")
		switch f.DefValue {
		case "", "0", "false", "[]":
		default:
			line += fmt.Sprintf(" (default %s)", f.DefValue)
		}
		fmt.Fprintln(w, line)
	})
}

// flagError rewords the flag package's messages with the flag spelt as
// users type it: "unknown flag --bogus" rather than "flag provided but
// not defined: -bogus".
func flagError(fs *flag.FlagSet, err error) error {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		return fmt.Errorf("unknown flag --%s", strings.TrimPrefix(name, "-"))
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: -"); ok {
		return fmt.Errorf("flag --%s needs a value", strings.TrimPrefix(name, "-"))
	}
	// invalid value "x" for flag -ttl: parse error
	if rest, ok := strings.CutPrefix(msg, "invalid value "); ok {
		if val, after, ok := strings.Cut(rest, " for flag -"); ok {
			name, why, _ := strings.Cut(after, ": ")
			name = strings.TrimPrefix(name, "-")
			if f := fs.Lookup(name); f != nil {
				if g, ok := f.Value.(flag.Getter); ok {
					switch g.Get().(type) {
					case time.Duration:
						why = "want a duration such as 500ms, 2s or 1m"
					case bool:
						why = "want true or false"
					case int, int64, uint, uint64:
						why = "want a whole number"
					}
				}
			}
			return fmt.Errorf("--%s %s: %s", name, val, why)
		}
	}
	return err
}

// noNegativeDurations refuses a negative value of any duration flag: a
// negative timeout, interval or grace period means nothing, and letting it
// through would fail later, after the process said it started.
func noNegativeDurations(fs *flag.FlagSet) error {
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		g, ok := f.Value.(flag.Getter)
		if !ok || err != nil {
			return
		}
		if d, ok := g.Get().(time.Duration); ok && d < 0 {
			err = Usagef("--%s %v: a duration must not be negative", f.Name, d)
		}
	})
	return err
}

// setFromEnv sets f from v; a repeatable flag takes a comma-separated list.
func setFromEnv(f *flag.Flag, v string) error {
	if _, ok := f.Value.(*StringList); ok {
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s != "" {
				if err := f.Value.Set(s); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return f.Value.Set(v)
}

func envName(flagName string) string {
	return "MESHDNS_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// StringList is a repeatable flag; each value may also be comma-separated.
type StringList []string

func (l *StringList) String() string { return strings.Join(*l, ",") }

func (l *StringList) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}
