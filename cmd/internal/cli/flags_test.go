package cli

import (
	"bytes"
	"errors"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestShort: a short flag sets its long flag's value, wins over the long
// flag's environment variable as the long flag would, has no variable of
// its own, and --help shows it beside the long name.
func TestShort(t *testing.T) {
	newFS := func() (*flag.FlagSet, *string) {
		fs := flag.NewFlagSet("short", flag.ContinueOnError)
		out := fs.String("output", "table", "table or json")
		Short(fs, "o", "output")
		return fs, out
	}
	t.Setenv("MESHDNS_OUTPUT", "env")
	t.Setenv("MESHDNS_O", "nope")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{args: []string{"-o", "json"}, want: "json"},
		{args: []string{"--output=json"}, want: "json"},
		{args: nil, want: "env"},
	} {
		fs, out := newFS()
		if err := ParseFlags(fs, tc.args, nil); err != nil || *out != tc.want {
			t.Errorf("ParseFlags(%q) = %v, --output %q; want nil, %q", tc.args, err, *out, tc.want)
		}
	}
	fs, _ := newFS()
	var help bytes.Buffer
	fs.SetOutput(&help)
	if err := ParseFlags(fs, []string{"--help"}, nil); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help: %v", err)
	}
	if !strings.Contains(help.String(), "\n  -o, --output string\n") || strings.Contains(help.String(), "  --o") {
		t.Errorf("--help shows the short flag apart from the long one:\n%s", help.String())
	}
}

// TestDurationVar: a Go duration, or a bare number of seconds as the flags
// that took seconds read before; the mistakes are usage errors.
func TestDurationVar(t *testing.T) {
	for _, tc := range []struct {
		arg     string
		want    time.Duration
		wantErr string
	}{
		{arg: "30s", want: 30 * time.Second},
		{arg: "30", want: 30 * time.Second},
		{arg: "1m30s", want: 90 * time.Second},
		{arg: "soon", wantErr: `--ttl "soon": want a duration such as 500ms, 2s or 1m`},
		{arg: "-5", wantErr: "--ttl -5s: a duration must not be negative"},
		{arg: "99999999999999999", wantErr: `--ttl "99999999999999999"`},
	} {
		fs := flag.NewFlagSet("d", flag.ContinueOnError)
		var d time.Duration
		DurationVar(fs, &d, "ttl", time.Second, "TTL")
		err := ParseFlags(fs, []string{"--ttl", tc.arg}, nil)
		var ue *UsageError
		switch {
		case tc.wantErr == "" && (err != nil || d != tc.want):
			t.Errorf("--ttl %s: %v, %v; want %v", tc.arg, err, d, tc.want)
		case tc.wantErr != "" && (!errors.As(err, &ue) || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("--ttl %s: %v; want a usage error with %q", tc.arg, err, tc.wantErr)
		}
	}
}

// TestBoolFlagError: a bool flag's bad value is worded as the others.
func TestBoolFlagError(t *testing.T) {
	fs := flag.NewFlagSet("b", flag.ContinueOnError)
	fs.Bool("quiet", false, "")
	err := ParseFlags(fs, []string{"--quiet=maybe"}, nil)
	if diff := cmp.Diff(`--quiet "maybe": want true or false`, err.Error()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
