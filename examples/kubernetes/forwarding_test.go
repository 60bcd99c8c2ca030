package kubernetes_test

import (
	"path"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/meshdns/meshdns/controlplane/forwardsource"
)

// TestInstallReadsForwardingRules: the installed control plane's
// --forwarding-rules is a key of the forwarding ConfigMap, mounted; the
// ConfigMap as shipped is a valid rules file with no rules, and so is an
// empty one (a user who deletes everything gets none, not an error).
func TestInstallReadsForwardingRules(t *testing.T) {
	objs := render(t, "kubernetes", "")
	var deploy appsv1.Deployment
	find(t, objs, "Deployment", "meshdns-controlplane", &deploy)
	c := deploy.Spec.Template.Spec.Containers[0]
	var file string
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--forwarding-rules="); ok {
			file = v
		}
	}
	if file == "" {
		t.Fatal("the control plane has no --forwarding-rules")
	}
	var volume string
	for _, m := range c.VolumeMounts {
		if m.MountPath == path.Dir(file) && m.ReadOnly {
			volume = m.Name
		}
	}
	var cmName string
	for _, v := range deploy.Spec.Template.Spec.Volumes {
		if v.Name == volume && v.ConfigMap != nil {
			cmName = v.ConfigMap.Name
		}
	}
	if cmName == "" {
		t.Fatalf("--forwarding-rules=%s is not in a mounted ConfigMap", file)
	}
	var cm corev1.ConfigMap
	find(t, objs, "ConfigMap", cmName, &cm)
	text, ok := cm.Data[path.Base(file)]
	if !ok {
		t.Fatalf("ConfigMap %s has no key %s", cmName, path.Base(file))
	}
	for name, data := range map[string]string{"as shipped": text, "empty": "", "comments only": "# none yet\n"} {
		rules, err := forwardsource.ParseFile([]byte(data))
		if err != nil || len(rules) != 0 {
			t.Errorf("%s: %d rules, %v; want none and no error", name, len(rules), err)
		}
	}
	// The example in the comment is a valid rule once uncommented.
	var example []string
	for _, l := range strings.Split(text, "\n") {
		if s, ok := strings.CutPrefix(l, "# "); ok && !strings.HasPrefix(s, "For example") {
			example = append(example, s)
		}
	}
	if rules, err := forwardsource.ParseFile([]byte(strings.Join(example, "\n"))); err != nil || len(rules) != 1 {
		t.Errorf("the commented example: %d rules, %v; want 1\n%s", len(rules), err, strings.Join(example, "\n"))
	}
}
