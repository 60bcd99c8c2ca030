package main

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshdns/meshdns/internal/testkit/buildtest"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

// meshdnsBinary is this command, built once for the tests that run it as
// users do: a process with its stdin, stdout, stderr and exit status.
var meshdnsBinary = &buildtest.Binary{Pkg: "github.com/meshdns/meshdns/cmd/meshdns"}

func TestMain(m *testing.M) {
	code := m.Run()
	meshdnsBinary.Remove()
	os.Exit(code)
}

// notInputs are the YAML and JSON files under examples/ and charts/ that
// are neither Kubernetes objects nor files meshdns reads, so validate
// rightly refuses them; each says what it is.
var notInputs = map[string]string{
	"charts/meshdns/Chart.yaml":           "helm's chart metadata",
	"charts/meshdns/values.yaml":          "helm values (rendered below with each documented combination)",
	"charts/meshdns/values.schema.json":   "the JSON schema of the values",
	"charts/meshdns/files/dashboard.json": "a Grafana dashboard, shipped inside a ConfigMap",
	"examples/monitoring/dashboard.json":  "a Grafana dashboard, shipped inside a ConfigMap",
	"examples/monitoring/rules_test.yaml": "promtool's unit tests of the alerting rules",
	"examples/nametable.json":             "the agent's --nametable-file (protojson), checked by the agent when it loads it",
}

// chartValues are the chart's documented value combinations
// (charts/meshdns/README.md and values.yaml): each renders objects that
// validate must accept.
var chartValues = map[string][]string{
	"defaults":    nil,
	"kustomize":   {"--namespace", "meshdns-system", "--include-crds", "--set", "createNamespace=true"},
	"cni":         {"--set", "cni.enabled=true", "--set", "cni.namespace=meshdns-cni", "--set", "cni.createNamespace=true"},
	"vm":          {"--set", "vm.enabled=true"},
	"monitoring":  {"--set", "monitoring.serviceMonitor.enabled=true", "--set", "monitoring.podMonitor.enabled=true", "--set", "monitoring.prometheusRule.enabled=true", "--set", "monitoring.dashboard.enabled=true"},
	"entries":     {"--set-file", "entries=../../examples/entries/corp.yaml"},
	"image tag":   {"--set", "image.tag=v1.2.3"},
	"no policies": {"--set", "networkPolicy.enabled=false", "--set", "podDisruptionBudget.enabled=false", "--set", "operatorRole=false"},
}

// TestValidateShipped runs the built binary's validate on every YAML and
// JSON file under examples/ and charts/ and on the chart rendered with
// each documented combination of values (helm template | validate -f -),
// and fails on any rejection. Each run must also have checked the
// ConfigMaps meshdns reads, so a validate that skipped everything fails.
func TestValidateShipped(t *testing.T) {
	bin := meshdnsBinary.Path(t)
	root := filepath.Join("..", "..")
	for _, dir := range []string{"examples", "charts"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			rel, _ := filepath.Rel(root, path)
			ext := filepath.Ext(path)
			if ext != ".yaml" && ext != ".yml" && ext != ".json" || strings.HasPrefix(rel, "charts/meshdns/templates/") {
				return nil // templates are not YAML until rendered, below
			}
			if why, ok := notInputs[rel]; ok {
				t.Logf("not validated: %s (%s)", rel, why)
				return nil
			}
			t.Run(rel, func(t *testing.T) { validateShipped(t, bin, nil, "-f", path) })
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for name, set := range chartValues {
		t.Run("helm template "+name, func(t *testing.T) {
			args := append([]string{"template", "meshdns", filepath.Join(root, "charts", "meshdns")}, set...)
			checks := validateShipped(t, bin, helmTemplate(t, args...), "-f", "-")
			for _, key := range []string{"template.yaml", "entries.yaml", "rules.yaml"} {
				if !hasCheck(checks, "key "+key) {
					t.Errorf("the rendered chart's ConfigMap key %s was not checked", key)
				}
			}
		})
	}
}

// validateShipped runs validate -o json args with stdin and fails on an
// exit status other than 0 or any invalid check; it returns the checks.
func validateShipped(t *testing.T, bin string, stdin []byte, args ...string) []check {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"validate", "-o", "json"}, args...)...)
	cmd.Stdin = bytes.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var checks []check
	if jerr := json.Unmarshal(stdout.Bytes(), &checks); jerr != nil {
		t.Fatalf("validate %s: %v; stdout is not JSON (%v):\n%s%s", strings.Join(args, " "), err, jerr, stdout.String(), stderr.String())
	}
	for _, c := range checks {
		switch c.Status {
		case "invalid":
			t.Errorf("rejected: %s %s: %s", c.File, c.Object, strings.Join(c.Errors, "; "))
		case "skipped":
			t.Logf("skipped: %s", c.Object)
		}
	}
	if err != nil {
		t.Errorf("validate %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return checks
}

func hasCheck(checks []check, objectSuffix string) bool {
	for _, c := range checks {
		if c.Status == "ok" && strings.HasSuffix(c.Object, objectSuffix) {
			return true
		}
	}
	return false
}

// helmTemplate runs the real helm: $HELM, or hack/deps.sh's build in
// ~/.cache/meshdns/helm, as examples/kubernetes' chart tests do.
func helmTemplate(t *testing.T, args ...string) []byte {
	t.Helper()
	h := os.Getenv("HELM")
	if h == "" {
		home, _ := os.UserHomeDir()
		h = filepath.Join(home, ".cache", "meshdns", "helm", "helm")
		if _, err := os.Stat(h); err != nil {
			testenv.Unavailable(t, "needs helm in %s (make deps builds it)", h)
		}
	}
	cmd := exec.Command(h, args...)
	dir := t.TempDir() // no user configuration or cache leaks in
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+dir, "HELM_CACHE_HOME="+dir, "HELM_DATA_HOME="+dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return out
}
