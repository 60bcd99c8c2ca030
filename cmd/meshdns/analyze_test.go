package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/meshdns/meshdns/cmd/internal/cli"
	"github.com/meshdns/meshdns/cni"
	"github.com/meshdns/meshdns/internal/testkit/certtest"
	"github.com/meshdns/meshdns/internal/testkit/kubetest"
)

// TestAnalyzeBrokenCluster breaks a real API server's cluster in every way
// analyze knows and checks it finds each, once, with the exit status and
// JSON of the CLI; then checks a healthy one finds nothing.
func TestAnalyzeBrokenCluster(t *testing.T) {
	c := kubetest.Start(t)
	ctx := context.Background()
	create := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("create %s: %v", what, err)
		}
	}
	for name, labels := range map[string]map[string]string{
		"meshdns-system": nil,
		"secure":         {"meshdns.io/inject": "enabled", "pod-security.kubernetes.io/enforce": "restricted"},
		"mesh":           {"meshdns.io/inject": "enabled"},
	} {
		_, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{})
		create("namespace "+name, err)
	}
	// The shipped webhook configuration: one entry with a caBundle of
	// another CA than the Secret's (stale), the other with none.
	data, err := os.ReadFile("../../examples/kubernetes/40-webhook.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var mwc admissionregistrationv1.MutatingWebhookConfiguration
	if err := yaml.UnmarshalStrict(data, &mwc); err != nil {
		t.Fatal(err)
	}
	served, old := certtest.NewCA(t, "current-ca"), certtest.NewCA(t, "old-ca")
	mwc.Webhooks[0].ClientConfig.CABundle = old.PEM
	_, err = c.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, &mwc, metav1.CreateOptions{})
	create("webhook configuration", err)
	certPEM, keyPEM := served.Issue(t, "meshdns-controlplane.meshdns-system.svc", true)
	_, err = c.Client.CoreV1().Secrets("meshdns-system").Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "meshdns-webhook-certs"},
		Data:       map[string][]byte{"ca.crt": served.PEM, corev1.TLSCertKey: certPEM, corev1.TLSPrivateKeyKey: keyPEM},
	}, metav1.CreateOptions{})
	create("secret", err)
	labels := map[string]string{"app.kubernetes.io/name": "meshdns-controlplane"}
	_, err = c.Client.AppsV1().Deployments("meshdns-system").Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "meshdns-controlplane"},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "controlplane", Image: "ghcr.io/meshdns/meshdns:v0.2.0"}}}},
		},
	}, metav1.CreateOptions{})
	create("deployment", err)

	agent := func(image string, uid int64, dnsPort, adminPort string) corev1.Container {
		return corev1.Container{Name: "meshdns-agent", Image: image, RestartPolicy: ptrTo(corev1.ContainerRestartPolicyAlways),
			Args:            []string{"agent", "--dns-addr", "127.0.0.1:" + dnsPort, "--admin-addr", "127.0.0.1:" + adminPort},
			SecurityContext: &corev1.SecurityContext{RunAsUser: ptrTo(uid)}}
	}
	app := corev1.Container{Name: "app", Image: "app"}
	pods := []*corev1.Pod{
		{ // Istio beside the default numbers, with its DNS capture on, and an old agent.
			ObjectMeta: metav1.ObjectMeta{Name: "with-istio", Namespace: "mesh"},
			Spec: corev1.PodSpec{InitContainers: []corev1.Container{agent("ghcr.io/meshdns/meshdns:v0.1.0", 1337, "15053", "15020"),
				{Name: "istio-proxy", Image: "istio/proxyv2", RestartPolicy: ptrTo(corev1.ContainerRestartPolicyAlways),
					Env: []corev1.EnvVar{{Name: "ISTIO_META_DNS_CAPTURE", Value: "true"}}}}, Containers: []corev1.Container{app}},
		},
		{ // CNI mode on a node without the plugin.
			ObjectMeta: metav1.ObjectMeta{Name: "cni-mode", Namespace: "mesh", Annotations: map[string]string{cni.AnnotationRedirect: `{"proxyUID":1337,"proxyGID":1337,"dnsPort":15053}`}},
			Spec:       corev1.PodSpec{NodeName: "node-b", InitContainers: []corev1.Container{agent("ghcr.io/meshdns/meshdns:v0.2.0", 1337, "15053", "15020")}, Containers: []corev1.Container{app}},
		},
		{ // Healthy: beside Istio on the alternative numbers, current image, CNI node with the plugin.
			ObjectMeta: metav1.ObjectMeta{Name: "healthy", Namespace: "mesh", Annotations: map[string]string{cni.AnnotationRedirect: `{"proxyUID":1553,"proxyGID":1553,"dnsPort":15153}`}},
			Spec: corev1.PodSpec{NodeName: "node-a", InitContainers: []corev1.Container{agent("ghcr.io/meshdns/meshdns:v0.2.0", 1553, "15153", "15120"),
				{Name: "istio-proxy", Image: "istio/proxyv2", RestartPolicy: ptrTo(corev1.ContainerRestartPolicyAlways)}}, Containers: []corev1.Container{app}},
		},
	}
	for _, p := range pods {
		_, err := c.Client.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
		create("pod "+p.Name, err)
	}
	cniPod, err := c.Client.CoreV1().Pods("meshdns-system").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "meshdns-cni-a", Labels: map[string]string{"app.kubernetes.io/name": "meshdns-cni"}},
		Spec:       corev1.PodSpec{NodeName: "node-a", Containers: []corev1.Container{{Name: "cni", Image: "meshdns"}}},
	}, metav1.CreateOptions{})
	create("cni pod", err)
	cniPod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	_, err = c.Client.CoreV1().Pods("meshdns-system").UpdateStatus(ctx, cniPod, metav1.UpdateOptions{})
	create("cni pod status", err)
	refused := brokenPolicies(ctx, t, c, "mesh")

	var stdout bytes.Buffer
	err = cli.Dispatch(ctx, []string{"analyze", "--kubeconfig", c.Kubeconfig, "--output", "json"}, &stdout, &stdout)
	if err == nil || !strings.Contains(err.Error(), "errors") {
		t.Errorf("analyze of a broken cluster: err %v, want the errors counted (exit 1)", err)
	}
	var got []finding
	if err := json.Unmarshal(stdout.Bytes(), &got); err != nil {
		t.Fatalf("--output json: %v\n%s", err, stdout.String())
	}
	type key struct{ Code, Object string }
	var keys []key
	for _, f := range got {
		keys = append(keys, key{f.Code, f.Object})
		if f.Message == "" || f.Fix == "" || (f.Severity != severityError && f.Severity != severityWarning) {
			t.Errorf("finding without message, fix or severity: %+v", f)
		}
	}
	want := []key{
		{codePodSecuritySkipped, "Namespace secure"},
		{codeEmptyCABundle, "MutatingWebhookConfiguration meshdns-sidecar-injector"},
		{codeStaleCABundle, "MutatingWebhookConfiguration meshdns-sidecar-injector"},
		{codeIstioDNSCapture, "Pod mesh/with-istio"},
		{codeIstioClash, "Pod mesh/with-istio"},
		{codeAgentBehind, "Pod mesh/with-istio"},
		{codeCNINodeWithout, "Pod mesh/cni-mode"},
		{codePolicyRejected, "DNSPolicy mesh/" + refused},
	}
	if diff := cmp.Diff(want, keys); diff != "" {
		t.Errorf("findings (-want +got):\n%s", diff)
	}
	var table bytes.Buffer
	_ = cli.Dispatch(ctx, []string{"analyze", "--kubeconfig", c.Kubeconfig}, &table, &table)
	t.Logf("meshdns analyze on the broken cluster:\n%s", table.String())

	// Repaired: both caBundles the Secret's CA, the namespace privileged,
	// the broken pods gone.
	hook, err := c.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, webhookName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range hook.Webhooks {
		hook.Webhooks[i].ClientConfig.CABundle = served.PEM
	}
	_, err = c.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Update(ctx, hook, metav1.UpdateOptions{})
	create("webhook update", err)
	ns, err := c.Client.CoreV1().Namespaces().Get(ctx, "secure", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns.Labels["pod-security.kubernetes.io/enforce"] = "privileged"
	_, err = c.Client.CoreV1().Namespaces().Update(ctx, ns, metav1.UpdateOptions{})
	create("namespace update", err)
	for _, name := range []string{"with-istio", "cni-mode"} {
		if err := c.Client.CoreV1().Pods("mesh").Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptrTo(int64(0))}); err != nil {
			t.Fatal(err)
		}
	}
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	if err := dyn.Resource(dnsPolicyResource).Namespace("mesh").Delete(ctx, refused, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	stdout.Reset()
	if err := cli.Dispatch(ctx, []string{"analyze", "--kubeconfig", c.Kubeconfig}, &stdout, &stdout); err != nil || !strings.Contains(stdout.String(), "No problems found") {
		t.Errorf("analyze of the repaired cluster: err %v\n%s", err, stdout.String())
	}
}
