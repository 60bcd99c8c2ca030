package kubernetes_test

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/meshdns/meshdns/controlplane/webhook"
)

// repoRoot is the repository, two levels up from this package.
const repoRoot = "../.."

// docFiles are the files users read for install steps and ports: every
// Markdown file, plus the VM unit and scripts. CHANGELOG.md is history and
// may name what was.
func docFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != repoRoot || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		switch {
		case d.IsDir(), d.Name() == "CHANGELOG.md":
		case strings.HasSuffix(path, ".md"), strings.HasPrefix(path, filepath.Join(repoRoot, "examples", "vm")) && !strings.HasSuffix(path, ".go"):
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// controlPlaneAddr is an address an agent is told to dial in the docs:
// `--control-plane HOST:PORT`, `MESHDNS_CONTROL_PLANE=HOST:PORT` or the
// template's `controlPlane: HOST:PORT`.
var controlPlaneAddr = regexp.MustCompile(`(?:--control-plane[ =]|MESHDNS_CONTROL_PLANE=|controlPlane: )([A-Za-z0-9.\-]+):([0-9]+)`)

// TestDocsControlPlanePorts: every control plane address the docs hand an
// agent uses a port that a shipped control plane Service serves gRPC on.
// Local demos (127.0.0.1, localhost) run the control plane with their own
// --grpc-addr and are left out.
func TestDocsControlPlanePorts(t *testing.T) {
	served := map[int64]string{}
	for _, f := range []string{"30-controlplane.yaml", filepath.Join("..", "overlays", "vm", "controlplane-vm.yaml")} {
		for _, o := range decodeFile(t, f) {
			if o.GetKind() != "Service" {
				continue
			}
			ports, _, _ := unstructured.NestedSlice(o.Object, "spec", "ports")
			for _, p := range ports {
				p := p.(map[string]any)
				if strings.HasPrefix(p["name"].(string), "grpc") {
					served[int64(p["port"].(float64))] = o.GetName()
				}
			}
		}
	}
	if len(served) == 0 {
		t.Fatal("no gRPC Service port in the manifests")
	}
	found := 0
	for _, f := range docFiles(t) {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range controlPlaneAddr.FindAllStringSubmatch(string(data), -1) {
			host, port := m[1], m[2]
			if host == "127.0.0.1" || host == "localhost" {
				continue
			}
			found++
			p, _ := strconv.ParseInt(port, 10, 64)
			if _, ok := served[p]; !ok {
				t.Errorf("%s: %q: no shipped control plane serves gRPC on %s (Services: %v)", f, m[0], port, served)
			}
		}
	}
	if found < 3 {
		t.Errorf("found %d control plane addresses in the docs; the pattern no longer matches them", found)
	}
}

// TestDocsInjectedPorts: the ports table of docs/design.md states the
// injected agent's ports as the webhook's defaults make them.
func TestDocsInjectedPorts(t *testing.T) {
	tmpl := webhook.DefaultTemplate()
	data, err := os.ReadFile(filepath.Join(repoRoot, "docs", "design.md"))
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{}
	for _, line := range strings.Split(string(data), "\n") {
		cells := strings.Split(line, "|")
		if len(cells) > 3 {
			rows[strings.TrimSpace(cells[1])] = strings.TrimSpace(cells[2])
		}
	}
	for what, want := range map[string]string{
		"agent DNS (UDP+TCP)":                                      "127.0.0.1:" + strconv.Itoa(int(tmpl.DNSPort)),
		"agent admin (debug, pprof, log level)":                    "127.0.0.1:" + strconv.Itoa(int(tmpl.AdminPort)),
		"agent probes and metrics (`--probe-addr`, injected pods)": "0.0.0.0:" + strconv.Itoa(int(tmpl.ProbePort)),
	} {
		if got, ok := rows[what]; !ok || got != want {
			t.Errorf("docs/design.md ports row %q = %q, want %q", what, got, want)
		}
	}
}

// TestDocsPackages: every package a README's package table names exists,
// relative to the README or to the repository.
func TestDocsPackages(t *testing.T) {
	name := regexp.MustCompile("`([a-z0-9_]+(?:/[a-z0-9_.]+)*/?)`")
	checked := 0
	for _, f := range docFiles(t) {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		inTable := false
		for _, line := range strings.Split(string(data), "\n") {
			cells := strings.Split(line, "|")
			if len(cells) < 3 {
				inTable = false
				continue
			}
			first := strings.TrimSpace(cells[1])
			if first == "package" || first == "path" {
				inTable = true
				continue
			}
			if !inTable {
				continue
			}
			for _, m := range name.FindAllStringSubmatch(first, -1) {
				p := strings.TrimSuffix(strings.TrimSuffix(m[1], "..."), "/")
				if p == "" {
					continue
				}
				checked++
				if !isDir(filepath.Join(filepath.Dir(f), p)) && !isDir(filepath.Join(repoRoot, p)) {
					t.Errorf("%s: package table names %q, which is not a directory", f, m[1])
				}
			}
		}
	}
	if checked < 20 {
		t.Errorf("checked %d package names; the tables are no longer found", checked)
	}
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

func decodeFile(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			return objs
		} else if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
}
