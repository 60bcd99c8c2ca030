package main

import "github.com/meshdns/meshdns/cmd/internal/cli"

// validatepolicy.go wraps the validate command to take --policy out of
// its arguments; validate.go now reads --policy itself (listed in --help,
// reported like every other input, --output json included) and calls
// validatePolicies, so this file, whose init runs after validatepolicy.go's
// (file-name order), keeps that wrapper's usage text and puts runValidate
// back.
func init() {
	c, ok := cli.Lookup("validate")
	if !ok {
		panic("validatereport.go: the validate command is not registered yet")
	}
	c.Run = runValidate
	cli.Register("validate", c)
}
