package cli

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestMain(m *testing.M) {
	// As a main package's main does, before anything reads BuildInfo.
	Stamp("v9.8.7", "abc123")
	// A command of this test binary, registered as a main package does.
	Register("echo", Command{
		Summary: "print the flags",
		Run: func(_ context.Context, args []string, stdout, _ io.Writer) error {
			fs := flag.NewFlagSet("echo", flag.ContinueOnError)
			fs.SetOutput(stdout)
			var list StringList
			fs.Var(&list, "item", "an item, repeatable")
			wait := fs.Duration("wait", time.Second, "how long")
			fail := fs.Bool("fail", false, "fail while running")
			if err := ParseFlags(fs, args, map[string][]string{"item": {"ECHO_ITEMS"}}); err != nil {
				return err
			}
			if *fail {
				return errors.New("asked to fail")
			}
			_, err := io.WriteString(stdout, strings.Join(list, "|")+" "+wait.String())
			return err
		},
	})
	os.Exit(m.Run())
}

func TestRun(t *testing.T) {
	tests := []struct {
		name   string
		args   []string
		env    map[string]string
		code   int
		stdout string
		stderr string
	}{
		{name: "command", args: []string{"echo", "--item", "a,b", "--item", "c", "--wait", "2s"}, stdout: "a|b|c 2s"},
		{name: "environment", env: map[string]string{"MESHDNS_ITEM": "x, y", "MESHDNS_WAIT": "5ms"}, args: []string{"echo"}, stdout: "x|y 5ms"},
		{name: "further environment variable", env: map[string]string{"ECHO_ITEMS": "z"}, args: []string{"echo"}, stdout: "z 1s"},
		{name: "flag wins over environment", env: map[string]string{"MESHDNS_ITEM": "x"}, args: []string{"echo", "--item", "f"}, stdout: "f 1s"},
		{name: "no command", code: 2, stderr: "meshdns: no command given\nRun 'meshdns --help' for usage.\n"},
		{name: "unknown command", args: []string{"nope"}, code: 2, stderr: `meshdns: unknown command "nope"`},
		{name: "flag before the command", args: []string{"--item", "a", "echo"}, code: 2, stderr: "flag --item given before the command"},
		{name: "unknown flag", args: []string{"echo", "--bogus"}, code: 2, stderr: "meshdns echo: unknown flag --bogus\nRun 'meshdns echo --help' for usage.\n"},
		{name: "flag without value", args: []string{"echo", "--wait"}, code: 2, stderr: "flag --wait needs a value"},
		{name: "bad duration", args: []string{"echo", "--wait", "soon"}, code: 2, stderr: `--wait "soon": want a duration such as 500ms, 2s or 1m`},
		{name: "negative duration", args: []string{"echo", "--wait", "-1s"}, code: 2, stderr: "--wait -1s: a duration must not be negative"},
		{name: "bad environment value", env: map[string]string{"MESHDNS_WAIT": "soon"}, args: []string{"echo"}, code: 2, stderr: `environment variable MESHDNS_WAIT="soon" (--wait)`},
		{name: "stray argument", args: []string{"echo", "extra"}, code: 2, stderr: `unexpected arguments: ["extra"]`},
		{name: "failure while running", args: []string{"echo", "--fail"}, code: 1, stderr: "meshdns: asked to fail\n"},
		{name: "help", args: []string{"--help"}, stdout: "  echo          print the flags\n  version       print the version"},
		{name: "command help", args: []string{"help", "echo"}, stdout: "usage: meshdns echo [flags]\n\nprint the flags\n\nflags (each also read from MESHDNS_<FLAG_NAME>"},
		{name: "command --help", args: []string{"echo", "--help"}, stdout: "  --wait duration\n    \thow long (default 1s)"},
		{name: "version", args: []string{"version"}, stdout: "meshdns v9.8.7 (revision abc123, go"},
		{name: "--version", args: []string{"--version"}, stdout: "meshdns v9.8.7 (revision abc123, go"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, k := range []string{"MESHDNS_ITEM", "MESHDNS_WAIT", "ECHO_ITEMS"} {
				t.Setenv(k, "") // restored after the test
				os.Unsetenv(k)
			}
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			var stdout, stderr bytes.Buffer
			code := Run(context.Background(), tt.args, &stdout, &stderr)
			if code != tt.code {
				t.Errorf("exit status %d, want %d (stderr %q)", code, tt.code, stderr.String())
			}
			if !strings.Contains(stdout.String(), tt.stdout) {
				t.Errorf("stdout %q, want it to contain %q", stdout.String(), tt.stdout)
			}
			if !strings.Contains(stderr.String(), tt.stderr) || (tt.stderr == "" && stderr.Len() > 0) {
				t.Errorf("stderr %q, want %q", stderr.String(), tt.stderr)
			}
		})
	}
}

// TestLookupAndWrap: a main package may wrap a registered command.
func TestLookupAndWrap(t *testing.T) {
	c, ok := Lookup("echo")
	if !ok {
		t.Fatal("echo is not registered")
	}
	t.Cleanup(func() { Register("echo", c) })
	inner := c.Run
	c.Run = func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
		io.WriteString(stdout, "wrapped ")
		return inner(ctx, args, stdout, stderr)
	}
	Register("echo", c)
	var stdout bytes.Buffer
	if code := Run(context.Background(), []string{"echo", "--item", "a"}, &stdout, io.Discard); code != 0 {
		t.Fatalf("exit status %d", code)
	}
	if diff := cmp.Diff("wrapped a 1s", stdout.String()); diff != "" {
		t.Errorf("(-want +got)\n%s", diff)
	}
}

func TestLogFlags(t *testing.T) {
	for _, tt := range []struct {
		args    []string
		wantErr string
	}{
		{args: nil},
		{args: []string{"--log-level", "debug", "--log-format", "json"}},
		{args: []string{"--log-level", "loud"}, wantErr: `--log-level "loud": want debug, info, warn or error`},
		{args: []string{"--log-format", "xml"}, wantErr: `--log-format "xml": want text or json`},
	} {
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		lf := NewLogFlags(fs, "level")
		if err := fs.Parse(tt.args); err != nil {
			t.Fatal(err)
		}
		log, level, err := lf.Logger(io.Discard)
		var ue *UsageError
		switch {
		case tt.wantErr != "" && (!errors.As(err, &ue) || err.Error() != tt.wantErr):
			t.Errorf("%q: err = %v, want the usage error %q", tt.args, err, tt.wantErr)
		case tt.wantErr == "" && (err != nil || log == nil || level == nil):
			t.Errorf("%q: logger %v, level %v, err %v", tt.args, log, level, err)
		}
	}
}

func TestPaths(t *testing.T) {
	dir := t.TempDir()
	if err := Readable("--dir", dir); err != nil {
		t.Errorf("Readable(folder) = %v", err)
	}
	if err := Readable("--file", dir+"/nope"); err == nil || err.Error() != "--file "+dir+"/nope: no such file or directory" {
		t.Errorf("Readable(missing) = %v", err)
	}
	for addr, ok := range map[string]bool{"127.0.0.1:53": true, ":15014": true, "[::1]:53": true, "localhost": false, "1.2.3.4:dns": false} {
		if err := HostPort("--addr", addr); (err == nil) != ok {
			t.Errorf("HostPort(%q) = %v, want ok %v", addr, err, ok)
		}
	}
}
