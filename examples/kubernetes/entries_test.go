package kubernetes_test

import (
	"os"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/meshdns/meshdns/controlplane/filesource"
)

// TestInstallReadsEntries: the installed control plane reads the entries
// ConfigMap of the install (its --entries path is that ConfigMap's
// volume), keeps their last good versions in a writable state directory,
// and the ConfigMap as shipped, and the README's example of it, are valid
// entries files.
func TestInstallReadsEntries(t *testing.T) {
	objs := render(t, "kubernetes", "")
	var deploy appsv1.Deployment
	configMaps := map[string]corev1.ConfigMap{}
	for _, o := range objs {
		switch o.GetKind() {
		case "Deployment":
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &deploy); err != nil {
				t.Fatal(err)
			}
		case "ConfigMap":
			var cm corev1.ConfigMap
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &cm); err != nil {
				t.Fatal(err)
			}
			configMaps[cm.Name] = cm
		}
	}
	c := deploy.Spec.Template.Spec.Containers[0]
	flags := map[string]string{}
	for _, a := range c.Args {
		if k, v, ok := strings.Cut(a, "="); ok {
			flags[k] = v
		}
	}
	mountOf := func(path string) (corev1.Volume, corev1.VolumeMount, bool) {
		for _, m := range c.VolumeMounts {
			if m.MountPath == path {
				for _, v := range deploy.Spec.Template.Spec.Volumes {
					if v.Name == m.Name {
						return v, m, true
					}
				}
			}
		}
		return corev1.Volume{}, corev1.VolumeMount{}, false
	}
	v, _, ok := mountOf(flags["--entries"])
	if !ok || v.ConfigMap == nil {
		t.Fatalf("--entries=%q is not a mounted ConfigMap", flags["--entries"])
	}
	cm, ok := configMaps[v.ConfigMap.Name]
	if !ok {
		t.Fatalf("the install has no ConfigMap %q for --entries", v.ConfigMap.Name)
	}
	for key, text := range cm.Data {
		if _, _, err := filesource.Parse([]byte(text)); err != nil {
			t.Errorf("ConfigMap %s key %s as shipped: %v", cm.Name, key, err)
		}
	}
	sv, sm, ok := mountOf(flags["--state-dir"])
	if !ok || sv.EmptyDir == nil || sm.ReadOnly {
		t.Errorf("--state-dir=%q is not a writable emptyDir (the root file system is read-only)", flags["--state-dir"])
	}

	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, example, ok := strings.Cut(string(readme), "```yaml\ndata:\n")
	if !ok {
		t.Fatal("README has no example of the entries ConfigMap")
	}
	example, _, _ = strings.Cut(example, "```")
	var data map[string]string
	if err := yaml.Unmarshal([]byte("data:\n"+example), &struct {
		Data *map[string]string `json:"data"`
	}{&data}); err != nil {
		t.Fatal(err)
	}
	for key, text := range data {
		entries, _, err := filesource.Parse([]byte(text))
		if err != nil || len(entries) == 0 {
			t.Errorf("README example %s: %d entries, %v", key, len(entries), err)
		}
	}
}
