package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/meshdns/meshdns/cmd/internal/cli"
	"github.com/meshdns/meshdns/controlplane/filesource"
	"github.com/meshdns/meshdns/controlplane/webhook"
)

func init() {
	cli.Register("validate", cli.Command{
		Summary: "check entries files and an injection template before they are applied (exit 0 valid, 1 invalid)",
		Usage: `usage: meshdns validate [--entries] FILE_OR_FOLDER... [--inject-template FILE]

Checks what the control plane would load, with the same rules, without running it: every entries file
(a folder's *.yaml, *.yml and *.json files, as --entries reads them) and the injection template. Every
argument that is not a flag is an entries path, so --entries a.yaml b.yaml and a shell glob work. Prints
one line per file; exits 0 when all are valid, 1 when one is not (the errors name the file and the entry),
2 for a mistake in the command line. For CI and for a validating step before kubectl apply.`,
		Run: runValidate,
	})
}

func runValidate(_ context.Context, args []string, stdout, _ io.Writer) error {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	fs.SetOutput(stdout)
	var entries cli.StringList
	fs.Var(&entries, "entries", "entries YAML file or folder of them (repeatable)")
	template := fs.String("inject-template", "", "injection template file (YAML or JSON)")
	quiet := fs.Bool("quiet", false, "print only the invalid files")
	flagArgs, paths := splitPaths(fs, args)
	if err := cli.ParseFlags(fs, flagArgs, nil); err != nil {
		return err
	}
	entries = append(entries, paths...)
	if len(entries) == 0 && *template == "" {
		return cli.Usagef("nothing to validate: give --entries or --inject-template")
	}
	bad := 0
	report := func(path, what string, err error) {
		if err != nil {
			bad++
			// Parse joins one error per entry; one line each.
			fmt.Fprintf(stdout, "INVALID %s: %s\n", path, strings.ReplaceAll(err.Error(), "\n", "\n        "))
			return
		}
		if !*quiet {
			fmt.Fprintf(stdout, "ok      %s (%s)\n", path, what)
		}
	}
	total := 0
	for _, p := range entries {
		files, err := filesource.Files(p)
		if err != nil {
			total++
			report(p, "", cli.PathError(err))
			continue
		}
		if len(files) == 0 {
			total++
			report(p, "", errors.New("folder holds no *.yaml, *.yml or *.json file"))
			continue
		}
		for _, f := range files {
			total++
			data, err := os.ReadFile(f)
			if err != nil {
				report(f, "", cli.PathError(err))
				continue
			}
			es, zones, err := filesource.Parse(data)
			report(f, fmt.Sprintf("%d entries, %d zones", len(es), len(zones)), err)
			if err == nil && !*quiet {
				warnPublic(stdout, f, es)
			}
		}
	}
	if *template != "" {
		total++
		data, err := os.ReadFile(*template)
		if err != nil {
			report(*template, "", cli.PathError(err))
		} else {
			t, err := webhook.ParseTemplate(data)
			report(*template, "injection template, image "+t.Image, err)
		}
	}
	if bad > 0 {
		return fmt.Errorf("%d of %d files invalid", bad, total)
	}
	return nil
}

// splitPaths separates the arguments that are not flags (nor a flag's
// value) from the flags, wherever they stand: `--entries a.yaml b.yaml`
// must read both files, as the usage line says, while Go's flag package
// stops at the first argument that is not a flag. After "--" everything
// is a path.
func splitPaths(fs *flag.FlagSet, args []string) (flagArgs, paths []string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return flagArgs, append(paths, args[i+1:]...)
		}
		if len(a) < 2 || a[0] != '-' {
			paths = append(paths, a)
			continue
		}
		flagArgs = append(flagArgs, a)
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		f := fs.Lookup(name)
		if hasValue || f == nil {
			continue
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			continue
		}
		if i+1 < len(args) {
			i++
			flagArgs = append(flagArgs, args[i])
		}
	}
	return flagArgs, paths
}
