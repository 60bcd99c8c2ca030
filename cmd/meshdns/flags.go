package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
)

// parseFlags parses args into fs, then fills every flag not given on the
// command line from the environment variable MESHDNS_<NAME> (upper case,
// dashes as underscores). extraEnv maps a flag name to further variables
// consulted after MESHDNS_<NAME>, such as POD_NAMESPACE from the downward API.
func parseFlags(fs *flag.FlagSet, args []string, extraEnv map[string][]string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %q", fs.Args())
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
				err = fmt.Errorf("env %s: %w", n, e)
			}
			return
		}
	})
	return err
}

// setFromEnv sets f from v; a repeatable flag takes a comma-separated list.
func setFromEnv(f *flag.Flag, v string) error {
	if _, ok := f.Value.(*stringList); ok {
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

// stringList is a repeatable flag; each value may also be comma-separated.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ",") }

func (l *stringList) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}
