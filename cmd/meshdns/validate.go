package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/meshdns/meshdns/cmd/internal/cli"
)

func init() {
	cli.Register("validate", cli.Command{
		Summary: "check entries, the injection template, forwarding rules and DNSPolicy objects before they are applied (exit 0 valid, 1 invalid)",
		Usage: `usage: meshdns validate [-f FILE_OR_FOLDER|-]... [--entries] FILE_OR_FOLDER... [--inject-template FILE] [--policy FILE_OR_FOLDER]...

Checks what the control plane would load, with the same rules, without running it. Every input takes
the bare file the control plane reads or the ConfigMap that ships it (examples/kubernetes, the chart);
a folder means its *.yaml, *.yml and *.json files; "-" is stdin.

  -f, --filename   any mix of Kubernetes objects, as kubectl apply -f reads them: the rendered chart
                   (helm template ... | meshdns validate -f -), kustomize build, examples/kubernetes.
                   ConfigMap keys template.yaml (injection template) and rules.yaml (forwarding
                   rules), the *.yaml keys of an entries ConfigMap and DNSPolicy objects are checked;
                   every other object is listed as skipped. A bare entries or forwarding file is
                   recognised by its entries, zones or rules list.
  --entries        entries files (every argument that is not a flag is one, so a shell glob works)
  --inject-template  the injection template

Prints one line per file, object or ConfigMap key (--output json: a list of them), and every error of
each, naming the file, the object and the field. Exits 0 when all are valid, 1 when one is not, 2 for
a mistake in the command line. For CI and for a validating step before kubectl apply.`,
		Run: runValidate,
	})
}

type validateFlags struct {
	entries, templates, files, policies cli.StringList
	quiet                               bool
	output                              string
}

func runValidate(_ context.Context, args []string, stdout, _ io.Writer) error {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	fs.SetOutput(stdout)
	var f validateFlags
	fs.Var(&f.files, "filename", `files or folders of Kubernetes objects or meshdns files, "-" for stdin (repeatable)`)
	fs.Var(&f.entries, "entries", "entries file or folder of them, bare or as a ConfigMap (repeatable)")
	fs.Var(&f.templates, "inject-template", "injection template file, bare or as a ConfigMap (repeatable)")
	fs.Var(&f.policies, "policy", "DNSPolicy file or folder of them (repeatable)")
	fs.BoolVar(&f.quiet, "quiet", false, "print only what is invalid")
	fs.StringVar(&f.output, "output", "table", "table or json")
	cli.Short(fs, "f", "filename")
	cli.Short(fs, "o", "output")
	flagArgs, paths := splitPaths(fs, args)
	if err := cli.ParseFlags(fs, flagArgs, nil); err != nil {
		return err
	}
	f.entries = append(f.entries, paths...)
	if f.output != "table" && f.output != "json" {
		return cli.Usagef("--output %q: want table or json", f.output)
	}
	if len(f.entries)+len(f.templates)+len(f.files)+len(f.policies) == 0 {
		return cli.Usagef("nothing to validate: give -f (Kubernetes objects or any meshdns file), --entries, --inject-template or --policy")
	}
	checks := f.run(os.Stdin)
	bad := 0
	for _, c := range checks {
		if c.Status == "invalid" {
			bad++
		}
	}
	if f.output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(checks); err != nil {
			return err
		}
	} else {
		printChecks(stdout, checks, f.quiet)
	}
	if bad > 0 {
		return fmt.Errorf("%d of %d checked inputs invalid", bad, len(checks))
	}
	return nil
}

// run checks every input of f: the policies first, as validatepolicy.go
// reported them before --policy was a flag of validate.go.
func (f *validateFlags) run(stdin io.Reader) []check {
	var checks []check
	if len(f.policies) > 0 {
		checks = policyChecks(f.policies)
	}
	for _, in := range []struct {
		paths cli.StringList
		kind  inputKind
	}{{f.files, kindAny}, {f.entries, kindEntries}, {f.templates, kindTemplate}} {
		for _, p := range in.paths {
			files, data, bad := readInput(p, stdin)
			if bad != nil {
				checks = append(checks, *bad)
				continue
			}
			for i, file := range files {
				checks = append(checks, checkFile(file, data[i], in.kind)...)
			}
		}
	}
	return checks
}

// policyChecks runs the DNSPolicy checks of validatepolicy.go and reads
// their lines back into checks, so that --policy has the output of the
// other inputs, --output json included.
func policyChecks(paths []string) []check {
	var buf bytes.Buffer
	_ = validatePolicies(paths, false, &buf) // each invalid file is a check below
	var out []check
	for _, line := range strings.Split(buf.String(), "\n") {
		switch {
		case strings.HasPrefix(line, "ok      "):
			file, summary, _ := strings.Cut(strings.TrimPrefix(line, "ok      "), " (")
			out = append(out, check{File: file, Kind: "DNSPolicy", Status: "ok", Summary: strings.TrimSuffix(summary, ")")})
		case strings.HasPrefix(line, "INVALID "):
			file, err, _ := strings.Cut(strings.TrimPrefix(line, "INVALID "), ": ")
			out = append(out, check{File: file, Kind: "DNSPolicy", Status: "invalid", Errors: []string{err}})
		case strings.HasPrefix(line, "        ") && len(out) > 0:
			last := &out[len(out)-1]
			last.Errors = append(last.Errors, strings.TrimSpace(line))
		}
	}
	return out
}

func printChecks(w io.Writer, checks []check, quiet bool) {
	for _, c := range checks {
		where := c.File
		if c.Object != "" {
			where += ": " + c.Object
		}
		switch c.Status {
		case "invalid":
			// One line per error, each naming file and object: grep and CI
			// logs show the whole of it.
			for _, e := range c.Errors {
				fmt.Fprintf(w, "INVALID %s: %s\n", where, e)
			}
		case "skipped":
			if !quiet {
				fmt.Fprintf(w, "skipped %s (%s)\n", where, c.Summary)
			}
		default:
			if !quiet {
				fmt.Fprintf(w, "ok      %s (%s)\n", where, c.Summary)
			}
		}
		for _, warn := range c.Warnings {
			if !quiet {
				fmt.Fprintf(w, "WARNING %s: %s\n", where, warn)
			}
		}
	}
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
