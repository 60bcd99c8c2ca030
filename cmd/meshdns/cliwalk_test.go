package main

import (
	"bytes"
	"errors"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// takesValue are the flags that stand alone like a bool but may take a
// value of another kind: --fallthrough[=zones].
var takesValue = map[string]bool{"fallthrough": true}

// helpFlag is one flag as --help lists it.
type helpFlag struct {
	short, name, arg string // arg "" for a bool flag
}

var (
	helpFlagRE  = regexp.MustCompile(`^  (?:-([A-Za-z]), )?--([a-z0-9-]+)(?: ([a-z]+))?$`)
	actionsRE   = regexp.MustCompile(`^usage: meshdns [a-z]+ ([a-z]+(?:\|[a-z]+)+) `)
	timeNameRE  = regexp.MustCompile(`(^|-)(timeout|interval|ttl|grace|window|period|lifetime|age|debounce|delay|wait)($|-)`)
	secondsUsed = regexp.MustCompile(`(?i)\bin seconds\b|\bseconds\)`)
)

// TestCLIRules walks every subcommand of the built binary and every flag
// its --help lists through the command line's rules, as a user meets
// them: --help and -h on stdout with exit status 0; a mistake (an unknown
// flag, a flag without its value, a value of the wrong type, a missing or
// unknown action) as one line and the hint on stderr, nothing on stdout,
// exit status 2; every time a duration; kubectl's short flags where
// kubectl has them.
func TestCLIRules(t *testing.T) {
	bin := meshdnsBinary.Path(t)
	top := runBin(t, bin, "--help")
	if top.code != 0 || top.stderr != "" {
		t.Fatalf("meshdns --help: %+v", top)
	}
	var names []string
	for _, l := range strings.Split(top.stdout[strings.Index(top.stdout, "commands:\n"):], "\n")[1:] {
		if f := strings.Fields(l); len(f) > 0 && strings.HasPrefix(l, "  ") {
			names = append(names, f[0])
		}
	}
	if len(names) < 9 {
		t.Fatalf("meshdns --help lists %d commands: %q", len(names), names)
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) { checkCommandRules(t, bin, name) })
	}
}

func checkCommandRules(t *testing.T, bin, name string) {
	help := runBin(t, bin, name, "--help")
	if help.code != 0 || help.stderr != "" || !strings.HasPrefix(help.stdout, "usage: meshdns "+name) {
		t.Fatalf("%s --help: exit %d, stderr %q, stdout starts %.40q; want 0, nothing, the usage", name, help.code, help.stderr, help.stdout)
	}
	if h := runBin(t, bin, name, "-h"); h.code != 0 || h.stdout != help.stdout || h.stderr != "" {
		t.Errorf("%s -h: exit %d, stderr %q; want 0 and the --help text on stdout", name, h.code, h.stderr)
	}
	// Commands with actions take them first; the flags follow the first.
	var prefix []string
	if m := actionsRE.FindStringSubmatch(help.stdout); m != nil {
		actions := strings.Split(m[1], "|")
		prefix = []string{actions[0]}
		wantMistake(t, bin, name, []string{name}, "no action given")
		wantMistake(t, bin, name, []string{name, "bogus"}, `unknown action "bogus"`)
	}
	args := func(rest ...string) []string { return append(append([]string{name}, prefix...), rest...) }
	wantMistake(t, bin, name, args("--no-such-flag"), "unknown flag --no-such-flag")
	flags := parseHelpFlags(help.stdout)
	has := map[string]helpFlag{}
	for _, f := range flags {
		has[f.name] = f
		if f.arg == "" && takesValue[f.name] {
			continue
		}
		if f.arg == "" {
			wantMistake(t, bin, name, args("--"+f.name+"=maybe"), "--"+f.name+` "maybe": want true or false`)
			continue
		}
		wantMistake(t, bin, name, args("--"+f.name), "flag --"+f.name+" needs a value")
		if f.short != "" {
			wantMistake(t, bin, name, args("-"+f.short), "flag --"+f.short+" needs a value")
		}
		switch f.arg {
		case "duration":
			wantMistake(t, bin, name, args("--"+f.name, "10parsecs"), "want a duration")
		case "int", "uint":
			wantMistake(t, bin, name, args("--"+f.name, "many"), "want a whole number")
		}
		if f.arg != "duration" && (timeNameRE.MatchString(f.name) || secondsUsed.MatchString(flagUsage(help.stdout, f.name))) {
			t.Errorf("%s --%s %s: a time, want a duration (30s, 5m)", name, f.name, f.arg)
		}
	}
	for long, short := range map[string]string{"output": "o", "filename": "f"} {
		if f, ok := has[long]; ok && f.short != short {
			t.Errorf("%s --%s: no -%s, as kubectl has", name, long, short)
		}
	}
	if _, ok := has["output"]; ok {
		if f, ok := has["namespace"]; ok && f.short != "n" {
			t.Errorf("%s --namespace: no -n, as kubectl has", name)
		}
		if f, ok := has["namespace"]; ok && has["all-namespaces"].short != "A" {
			t.Errorf("%s --namespace without -A/--all-namespaces, as kubectl has (%v)", name, f)
		}
	}
}

// wantMistake runs args and wants a usage error: exit status 2, nothing
// on stdout, on stderr the line naming the mistake and the hint.
func wantMistake(t *testing.T, bin, name string, args []string, want string) {
	t.Helper()
	r := runBin(t, bin, args...)
	lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
	if r.code != 2 || r.stdout != "" || len(lines) != 2 || !strings.HasPrefix(lines[0], "meshdns "+name+": ") ||
		!strings.Contains(lines[0], want) || lines[1] != "Run 'meshdns "+name+" --help' for usage." {
		t.Errorf("meshdns %s: exit %d, stdout %q, stderr %q; want 2, nothing, a line with %q and the hint",
			strings.Join(args, " "), r.code, r.stdout, r.stderr, want)
	}
}

func parseHelpFlags(help string) []helpFlag {
	_, list, ok := strings.Cut(help, "\nflags (")
	if !ok {
		return nil
	}
	var out []helpFlag
	for _, l := range strings.Split(list, "\n") {
		if m := helpFlagRE.FindStringSubmatch(l); m != nil {
			out = append(out, helpFlag{short: m[1], name: m[2], arg: m[3]})
		}
	}
	return out
}

// flagUsage is the help text of --name: the lines after its own.
func flagUsage(help, name string) string {
	lines := strings.Split(help, "\n")
	for i, l := range lines {
		if m := helpFlagRE.FindStringSubmatch(l); m != nil && m[2] == name && i+1 < len(lines) {
			return lines[i+1]
		}
	}
	return ""
}

type binResult struct {
	code           int
	stdout, stderr string
}

// runBin runs the binary with args, no stdin, and no MESHDNS_ variable of
// the test's environment.
func runBin(t *testing.T, bin string, args ...string) binResult {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = []string{"HOME=" + t.TempDir(), "PATH=/usr/bin:/bin"}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	code := 0
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("run %s: %v", strings.Join(args, " "), err)
	}
	return binResult{code: code, stdout: stdout.String(), stderr: stderr.String()}
}
