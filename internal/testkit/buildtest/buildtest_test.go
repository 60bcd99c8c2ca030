package buildtest

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

func TestBuildOnce(t *testing.T) {
	b := &Binary{Pkg: "github.com/meshdns/meshdns/internal/testkit/buildtest/testdata/hello", Args: []string{"-ldflags", "-X main.greeting=hi"}}
	defer b.Remove()
	p := b.Path(t)
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(p).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "hi" {
		t.Errorf("run %s: %q, %v; want hi (the -ldflags of Args)", p, out, err)
	}
	// The second call builds nothing: the same file, untouched.
	if p2 := b.Path(t); p2 != p {
		t.Errorf("second Path = %s, want %s", p2, p)
	}
	if fi2, err := os.Stat(p); err != nil || !fi2.ModTime().Equal(fi.ModTime()) {
		t.Errorf("binary rebuilt or gone on the second Path: %v", err)
	}
	b.Remove()
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Errorf("after Remove: %v, want the binary gone", err)
	}
}

func TestBuildError(t *testing.T) {
	b := &Binary{Pkg: "github.com/meshdns/meshdns/internal/testkit/buildtest/testdata/nosuch"}
	defer b.Remove()
	if _, err := b.build("go"); err == nil || !strings.Contains(err.Error(), "go build") {
		t.Errorf("build of a missing package: %v, want a go build error", err)
	}
}
