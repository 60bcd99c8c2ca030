// Package hack holds the tests of the scripts in this folder.
package hack

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// changelogVersion is the release being made: the newest CHANGELOG.md
// heading's version, by the rule of docs/docs_test.go.
func changelogVersion(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	heading := regexp.MustCompile(`(?m)^## \[.*$`).FindString(string(b))
	m := regexp.MustCompile(`\d+\.\d+\.\d+`).FindString(heading)
	if m == "" {
		t.Fatalf("CHANGELOG.md: the newest heading %q names no version", heading)
	}
	return "v" + m
}

// makeRelease runs make release from the repository's root into dir.
func makeRelease(t *testing.T, version, dir string) (string, error) {
	t.Helper()
	cmd := exec.Command("make", "--no-print-directory", "release", "VERSION="+version,
		"BIN="+filepath.Join(dir, "bin"), "RELEASE_DIR="+filepath.Join(dir, "release"))
	cmd.Dir = ".."
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestReleaseRefusesOtherVersion: a VERSION other than the CHANGELOG's
// newest is refused, saying which one is expected, before anything is
// built.
func TestReleaseRefusesOtherVersion(t *testing.T) {
	dir := t.TempDir()
	out, err := makeRelease(t, "v9.9.9", dir)
	if err == nil {
		t.Fatalf("make release VERSION=v9.9.9 succeeded:\n%s", out)
	}
	if want := "is not " + changelogVersion(t) + ", the newest CHANGELOG.md version"; !strings.Contains(out, want) {
		t.Errorf("make release VERSION=v9.9.9 says %q, want it to contain %q", out, want)
	}
	if _, err := os.Stat(filepath.Join(dir, "release")); !os.IsNotExist(err) {
		t.Errorf("the refused release made its folder (stat: %v)", err)
	}
}

// TestRelease runs the whole make release (one and a half minutes with a
// warm build cache on a loaded 2-core machine: the image's four builds
// link afresh, helm package, the SBOMs) and checks what it ships.
func TestRelease(t *testing.T) {
	helm := filepath.Join(os.Getenv("HOME"), ".cache/meshdns/helm/helm")
	if _, err := os.Stat(helm); err != nil {
		if os.Getenv("CI") == "" {
			t.Skipf("needs helm (make deps builds it; runs in CI): %v", err)
		}
		t.Fatalf("needs helm (make deps builds it): %v", err)
	}
	v := changelogVersion(t)
	dir := t.TempDir()
	if out, err := makeRelease(t, v, dir); err != nil {
		t.Fatalf("make release VERSION=%s: %v\n%s", v, err, out)
	}
	rel := filepath.Join(dir, "release")
	binaries := map[string]elf.Machine{
		"meshdns-" + v + "-linux-amd64": elf.EM_X86_64, "meshdns-" + v + "-linux-arm64": elf.EM_AARCH64,
		"meshdns-agent-" + v + "-linux-amd64": elf.EM_X86_64, "meshdns-agent-" + v + "-linux-arm64": elf.EM_AARCH64,
	}
	want := []string{"SHA256SUMS", "meshdns-" + v + "-image.tar", "meshdns-" + strings.TrimPrefix(v, "v") + ".tgz"}
	for b := range binaries {
		want = append(want, b, b+".cdx.json")
	}
	sort.Strings(want)
	entries, err := os.ReadDir(rel)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("files of the release (-want +got):\n%s", diff)
	}
	checkSums(t, rel, want)
	for name, machine := range binaries {
		checkBinary(t, filepath.Join(rel, name), machine, v)
	}
	checkChart(t, filepath.Join(rel, "meshdns-"+strings.TrimPrefix(v, "v")+".tgz"), v)
	checkImage(t, filepath.Join(rel, "meshdns-"+v+"-image.tar"))
	for name, machine := range binaries {
		cmd, _, _ := strings.Cut(name, "-"+v)
		arch := map[elf.Machine]string{elf.EM_X86_64: "amd64", elf.EM_AARCH64: "arm64"}[machine]
		checkSBOM(t, filepath.Join(rel, name+".cdx.json"), "./cmd/"+cmd, arch)
	}
}

// checkSums: SHA256SUMS names every other file once, with its digest.
func checkSums(t *testing.T, dir string, files []string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	sums := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		sum, name, ok := strings.Cut(sc.Text(), "  ")
		if !ok {
			t.Fatalf("SHA256SUMS line %q is not sha256sum's", sc.Text())
		}
		sums[name] = sum
	}
	for _, f := range files {
		if f == "SHA256SUMS" {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		d := sha256.Sum256(data)
		if got := sums[f]; got != hex.EncodeToString(d[:]) {
			t.Errorf("SHA256SUMS gives %s %q, want %x", f, got, d)
		}
		delete(sums, f)
	}
	if len(sums) != 0 {
		t.Errorf("SHA256SUMS names files the release lacks: %v", sums)
	}
}

// checkBinary: a static ELF for machine, stamped with version.
func checkBinary(t *testing.T, path string, machine elf.Machine, version string) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Machine != machine {
		t.Errorf("%s: machine %s, want %s", path, f.Machine, machine)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s: has an interpreter: not static", path)
		}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(data, []byte(version)) {
		t.Errorf("%s: not stamped with %s", path, version)
	}
}

// checkChart: the packaged chart's Chart.yaml names the release's version.
func checkChart(t *testing.T, path, version string) {
	t.Helper()
	chart := string(tarFile(t, path, true, "meshdns/Chart.yaml"))
	for _, want := range []string{"\nversion: " + strings.TrimPrefix(version, "v") + "\n", "\nappVersion: " + version + "\n"} {
		if !strings.Contains(chart, want) {
			t.Errorf("%s: Chart.yaml lacks %q:\n%s", path, want, chart)
		}
	}
}

// checkImage: the image tarball is an OCI layout with an index.
func checkImage(t *testing.T, path string) {
	t.Helper()
	var index struct {
		Manifests []json.RawMessage `json:"manifests"`
	}
	if err := json.Unmarshal(tarFile(t, path, false, "index.json"), &index); err != nil || len(index.Manifests) == 0 {
		t.Errorf("%s: index.json names no manifest (%v)", path, err)
	}
}

// tarFile is the content of name in the tar (gzipped when gz) at path.
func tarFile(t *testing.T, path string, gz bool, name string) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var r io.Reader = f
	if gz {
		if r, err = gzip.NewReader(f); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err != nil {
			t.Fatalf("%s: no %s (%v)", path, name, err)
		}
		if strings.TrimPrefix(h.Name, "./") == name {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
	}
}

// checkSBOM: a CycloneDX document whose components are the modules the
// command links on linux/arch, each at the version go list gives.
func checkSBOM(t *testing.T, path, pkg, arch string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var bom struct {
		BOMFormat  string `json:"bomFormat"`
		Components []struct {
			Name, Version string
		} `json:"components"`
	}
	if err := json.Unmarshal(b, &bom); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if bom.BOMFormat != "CycloneDX" {
		t.Errorf("%s: bomFormat %q, want CycloneDX", path, bom.BOMFormat)
	}
	var got []string
	for _, c := range bom.Components {
		got = append(got, c.Name+"@"+c.Version)
	}
	sort.Strings(got)
	cmd := exec.Command("go", "list", "-deps", "-f", "{{with .Module}}{{if not .Main}}{{.Path}}@{{.Version}}{{end}}{{end}}", pkg)
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH="+arch, "CGO_ENABLED=0")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %s: %v", pkg, err)
	}
	seen := map[string]bool{}
	var want []string
	for _, m := range strings.Fields(string(out)) {
		if !seen[m] {
			seen[m] = true
			want = append(want, m)
		}
	}
	sort.Strings(want)
	if len(want) == 0 {
		t.Fatalf("go list %s: no modules", pkg)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("%s: components against the modules %s links (-want +got):\n%s", path, pkg, diff)
	}
}
