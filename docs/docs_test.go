// Package docs holds the tests of the front page (README.md) and of the
// pages in this folder: one version everywhere, the front page's shape, and
// links that lead somewhere.
package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// semver is a version as the release names it, with or without the v.
var semver = regexp.MustCompile(`v?(\d+\.\d+\.\d+)`)

// TestOneVersion: the release being made is named once per place a user
// reads it, and every place names the same one: the newest CHANGELOG
// heading, the chart's appVersion and default image tag, the install's
// image tag, and every version the README and these pages show (sample
// output of meshdns version and status, make image, go install).
// Upgrade examples name the next version NEW_TAG.
func TestOneVersion(t *testing.T) {
	heading := firstMatch(t, "../CHANGELOG.md", `(?m)^## \[.*$`)
	m := semver.FindStringSubmatch(heading)
	if m == nil {
		t.Fatalf("CHANGELOG.md: the newest heading %q names no version", heading)
	}
	want := "v" + m[1]
	places := map[string]string{
		"charts/meshdns/Chart.yaml appVersion":              firstGroup(t, "../charts/meshdns/Chart.yaml", `(?m)^appVersion:\s*"?([^"\s]+)`),
		"charts/meshdns/values.yaml image.tag":              firstGroup(t, "../charts/meshdns/values.yaml", `(?m)^image:\n(?:\s+.*\n)*?\s+tag:\s*"?([^"\s]+)`),
		"examples/kubernetes/kustomization.yaml newTag":     firstGroup(t, "../examples/kubernetes/kustomization.yaml", `(?m)^\s+newTag:\s*(\S+)`),
		"charts/meshdns/Chart.yaml version (without the v)": "v" + firstGroup(t, "../charts/meshdns/Chart.yaml", `(?m)^version:\s*"?([^"\s]+)`),
	}
	for place, got := range places {
		if got != want {
			t.Errorf("%s = %s, want %s (the newest CHANGELOG.md heading: %q)", place, got, want, heading)
		}
	}
	// The pages that show meshdns's own version; others may name other
	// projects' versions (CoreDNS vX.Y.Z).
	for _, page := range []string{"../README.md", "install.md", "operate.md", "cli.md", "telemetry.md", "architecture.md"} {
		for i, line := range strings.Split(read(t, page), "\n") {
			for _, v := range semver.FindAllString(line, -1) {
				if strings.HasPrefix(v, "v") && v != want {
					t.Errorf("%s:%d shows %s, want %s (or a placeholder such as NEW_TAG): %s", page, i+1, v, want, line)
				}
			}
		}
	}
}

// TestFrontPage: README.md is the front page. It stays short, and near its
// top it shows the two commands a new user needs on a fresh machine: the
// demo doing meshdns's main job, and every test (the command .ci/run
// runs), with the tools they assume.
func TestFrontPage(t *testing.T) {
	readme := read(t, "../README.md")
	lines := strings.Split(strings.TrimRight(readme, "\n"), "\n")
	if len(lines) > 250 {
		t.Errorf("README.md has %d lines, want at most 250: move reference material to docs/", len(lines))
	}
	top := strings.Join(lines[:min(len(lines), 80)], "\n")
	for _, want := range []string{
		"\nmake run\n", "dig @127.0.0.1 -p 15053 web.demo.svc.cluster.local", "\nmake test\n",
		"`make`", "`git`", "`dig`", "`curl`",
	} {
		if !strings.Contains(top, want) {
			t.Errorf("the first 80 lines of README.md lack %q", want)
		}
	}
	_, targets, ok := strings.Cut(strings.Join(strings.Fields(top), " "), "lists every target: ")
	targets, _, _ = strings.Cut(targets, ".")
	listed := map[string]bool{}
	for _, name := range strings.Split(targets, ", ") {
		listed[name] = true
	}
	for _, m := range regexp.MustCompile(`(?m)^([a-z0-9-]+):.*## `).FindAllStringSubmatch(read(t, "../Makefile"), -1) {
		if !ok || !listed[m[1]] {
			t.Errorf("README.md's list of make targets lacks %s", m[1])
		}
	}
	ci := read(t, "../.ci/run")
	if !regexp.MustCompile(`(?m)^make test$`).MatchString(ci) {
		t.Errorf(".ci/run does not run make test, the README's test command")
	}
}

// TestLinks: every relative link of README.md and these pages names a file
// or folder that exists and, with a #fragment, a heading of that file.
func TestLinks(t *testing.T) {
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	for _, page := range pages(t) {
		for _, m := range link.FindAllStringSubmatch(withoutCode(read(t, page)), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, frag, _ := strings.Cut(target, "#")
			path := page
			if file != "" {
				path = filepath.Join(filepath.Dir(page), file)
			}
			if _, err := os.Stat(path); err != nil {
				t.Errorf("%s: link %s: %v", page, target, err)
				continue
			}
			if frag != "" && !anchors(t, path)[frag] {
				t.Errorf("%s: link %s: %s has no heading #%s", page, target, path, frag)
			}
		}
	}
}

// pages are README.md and every page of this folder.
func pages(t *testing.T) []string {
	t.Helper()
	md, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{"../README.md"}, md...)
}

// anchors are the fragments GitHub gives the headings of the Markdown file
// at path: lower case, punctuation dropped, spaces as dashes.
func anchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	drop := regexp.MustCompile(`[^\p{L}\p{N} _-]`)
	out := map[string]bool{}
	for _, line := range strings.Split(withoutCode(read(t, path)), "\n") {
		h, ok := strings.CutPrefix(line, "#")
		if !ok {
			continue
		}
		h = strings.TrimSpace(strings.TrimLeft(h, "#"))
		out[strings.ReplaceAll(drop.ReplaceAllString(strings.ToLower(h), ""), " ", "-")] = true
	}
	return out
}

// withoutCode drops fenced code blocks, whose lines are neither headings
// nor links.
func withoutCode(s string) string {
	var b strings.Builder
	fenced := false
	for _, line := range strings.Split(s, "\n") {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// firstMatch returns the first match of expr in the file at path.
func firstMatch(t *testing.T, path, expr string) string {
	t.Helper()
	m := regexp.MustCompile(expr).FindString(read(t, path))
	if m == "" {
		t.Fatalf("%s: nothing matches %s", path, expr)
	}
	return m
}

// firstGroup returns the first group of expr's first match in the file at
// path.
func firstGroup(t *testing.T, path, expr string) string {
	t.Helper()
	m := regexp.MustCompile(expr).FindStringSubmatch(read(t, path))
	if m == nil {
		t.Fatalf("%s: nothing matches %s", path, expr)
	}
	return m[1]
}
