package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
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
	fs.Visit(func(f *flag.Flag) {
		set[f.Name] = true
		if long, ok := shortOf(f); ok {
			set[long] = true // -o json is --output json: the environment must not override it
		}
	})
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if _, short := shortOf(f); set[f.Name] || short || err != nil {
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
	short := map[string]string{}
	fs.VisitAll(func(f *flag.Flag) {
		if long, ok := shortOf(f); ok {
			short[long] = f.Name
		}
	})
	fs.VisitAll(func(f *flag.Flag) {
		if _, ok := shortOf(f); ok {
			return
		}
		// flag.PrintDefaults spells flags with one dash; users and the
		// READMEs use two.
		arg, usage := flag.UnquoteUsage(f)
		if g, ok := f.Value.(flag.Getter); ok && arg == "value" {
			if _, ok := g.Get().(time.Duration); ok {
				arg = "duration"
			}
		}
		line := "  --" + f.Name
		if s, ok := short[f.Name]; ok {
			line = "  -" + s + ", --" + f.Name
		}
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

// shortUsage starts the usage of a short flag, which PrintHelp shows
// beside its long name rather than on a line of its own.
const shortUsage = "\x00short for --"

// Short makes -short (one letter) another name of fs's flag long, as
// kubectl's -o for --output: both set the same value, --help shows them
// on one line, and the environment variable is the long name's only.
func Short(fs *flag.FlagSet, short, long string) {
	f := fs.Lookup(long)
	if f == nil {
		panic("cli.Short: no flag --" + long)
	}
	fs.Var(f.Value, short, shortUsage+long)
}

// shortOf returns the long name of f when f is a short flag.
func shortOf(f *flag.Flag) (long string, ok bool) {
	return strings.CutPrefix(f.Usage, shortUsage)
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
	// invalid boolean value "x" for -quiet: parse error
	if rest, ok := strings.CutPrefix(msg, "invalid boolean value "); ok {
		if val, name, ok := strings.Cut(rest, " for -"); ok {
			name, _, _ = strings.Cut(name, ": ")
			return fmt.Errorf("--%s %s: want true or false", strings.TrimPrefix(name, "-"), val)
		}
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

// DurationVar defines a duration flag that also takes a bare whole number
// as seconds: flags that took seconds as a number keep reading the
// command lines and environment written for them ("--ttl 30" is 30s).
func DurationVar(fs *flag.FlagSet, p *time.Duration, name string, value time.Duration, usage string) {
	*p = value
	fs.Var((*seconds)(p), name, usage+" (a duration such as 30s or 5m; a bare number is seconds)")
}

type seconds time.Duration

func (d *seconds) Set(s string) error {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		if n > int64(math.MaxInt64/time.Second) || n < int64(math.MinInt64/time.Second) {
			return errors.New("out of range")
		}
		*d = seconds(time.Duration(n) * time.Second)
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = seconds(v)
	return nil
}

func (d *seconds) String() string { return time.Duration(*d).String() }
func (d *seconds) Get() any       { return time.Duration(*d) }
