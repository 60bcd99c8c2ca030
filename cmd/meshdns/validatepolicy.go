package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/meshdns/meshdns/cmd/internal/cli"
	"github.com/meshdns/meshdns/controlplane/filesource"
	"github.com/meshdns/meshdns/controlplane/policysource"
)

// validate --policy lives in its own file, wrapping the validate command
// of validate.go: Go runs a package's init functions in file-name order,
// so validate.go's has registered the command by now (checked).
func init() {
	c, ok := cli.Lookup("validate")
	if !ok {
		panic("validatepolicy.go: the validate command is not registered yet")
	}
	c.Usage += `

--policy FILE_OR_FOLDER (repeatable) checks DNSPolicy objects, the YAML kubectl would apply (a folder's
*.yaml, *.yml and *.json files), with the control plane's rules: the CRD's schema and limits (10000 rules,
patterns of 254 characters), what it cannot see, such as one pattern twice in another case, a file's size,
and the rules of one namespace's policies together, as --policy-file reads them.`
	entries := c.Run
	c.Run = func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
		policies, rest, quiet := splitPolicyArgs(args)
		if len(policies) == 0 {
			return entries(ctx, args, stdout, stderr)
		}
		err := validatePolicies(policies, quiet, stdout)
		if len(rest) > 0 && !(len(rest) == 1 && quiet) {
			err = errors.Join(err, entries(ctx, rest, stdout, stderr))
		}
		return err
	}
	cli.Register("validate", c)
}

// splitPolicyArgs takes the --policy flags (-policy, --policy=X) out of
// args, and reports whether --quiet is among the others.
func splitPolicyArgs(args []string) (policies, rest []string, quiet bool) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return policies, append(rest, args[i:]...), quiet
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		switch {
		case strings.HasPrefix(a, "-") && name == "policy" && hasValue:
			policies = append(policies, value)
			continue
		case strings.HasPrefix(a, "-") && name == "policy" && i+1 < len(args):
			i++
			policies = append(policies, args[i])
			continue
		case strings.HasPrefix(a, "-") && name == "quiet" && (!hasValue || value == "true"):
			quiet = true
		}
		rest = append(rest, a)
	}
	return policies, rest, quiet
}

func validatePolicies(paths []string, quiet bool, stdout io.Writer) error {
	bad, total := 0, 0
	report := func(path, what string, err error) {
		total++
		if err != nil {
			bad++
			fmt.Fprintf(stdout, "INVALID %s: %s\n", path, strings.ReplaceAll(err.Error(), "\n", "\n        "))
			return
		}
		if !quiet {
			fmt.Fprintf(stdout, "ok      %s (%s)\n", path, what)
		}
	}
	var all []policysource.Policy
	from := map[string]string{} // "namespace/name" -> file, for the budget's refusals
	for _, p := range paths {
		files, err := filesource.Files(p)
		if err == nil && len(files) == 0 {
			err = errors.New("folder holds no *.yaml, *.yml or *.json file")
		}
		if err != nil {
			report(p, "", cli.PathError(err))
			continue
		}
		for _, f := range files {
			data, err := policysource.ReadFile(f)
			if err != nil {
				report(f, "", cli.PathError(err))
				continue
			}
			ps, err := policysource.ParseFile(data)
			names := make([]string, len(ps))
			rules := 0
			for i, p := range ps {
				names[i] = p.Namespace + "/" + p.Name
				rules += len(p.DNS.Rules)
				from[names[i]] = f
			}
			report(f, fmt.Sprintf("%d DNSPolicy: %s, %d rules", len(ps), strings.Join(names, ", "), rules), err)
			if err == nil {
				all = append(all, ps...) // the control plane takes a file whole or not at all
			}
		}
	}
	// Together, as the control plane reads them: the policies of one
	// namespace are bounded as one policy is, since a pod gets their merge.
	store := policysource.NewStore()
	store.SetPolicies(policysource.FileOrigin, all)
	refused := store.Refused(policysource.FileOrigin)
	for _, key := range slices.Sorted(maps.Keys(refused)) {
		bad++
		fmt.Fprintf(stdout, "INVALID %s: %v\n", from[key], refused[key])
	}
	if bad > 0 {
		return fmt.Errorf("%d of %d policy files invalid", bad, total)
	}
	return nil
}
