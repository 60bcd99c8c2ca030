package main

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/meshdns/meshdns/cni"
	"github.com/meshdns/meshdns/controlplane/webhook"
)

// cluster is what analyze reads from the API server; the checks are pure
// functions of it, so they are tested on hand-made clusters as well as a
// real API server.
type cluster struct {
	now          time.Time
	system       string                                                // meshdns's namespace
	webhook      *admissionregistrationv1.MutatingWebhookConfiguration // or nil
	certs        *corev1.Secret                                        // the webhook's Secret, or nil
	controlPlane *appsv1.Deployment                                    // or nil
	namespaces   []corev1.Namespace
	pods         []corev1.Pod
	cniPods      []corev1.Pod // pods of the meshdns-cni DaemonSet
	policies     []dnsPolicy  // DNSPolicy objects of every namespace

	quarantine []replicaQuarantine // what each replica quarantined (quarantine.go)
}

// finding is one problem analyze reports.
type finding struct {
	Code     string `json:"code"`
	Severity string `json:"severity"` // Error or Warning
	Object   string `json:"object"`   // Kind namespace/name or Kind name
	Message  string `json:"message"`
	Fix      string `json:"fix"`
}

// The codes, one per kind of problem; they are a contract with scripts
// (add codes, never reuse one).
const (
	codePodSecuritySkipped = "MD0101"
	codeNoWebhook          = "MD0201"
	codeEmptyCABundle      = "MD0202"
	codeStaleCABundle      = "MD0203"
	codeIstioDNSCapture    = "MD0301"
	codeIstioClash         = "MD0302"
	codeAgentBehind        = "MD0401"
	codeVersionQuarantined = "MD0402" // quarantine.go
	codeCNINodeWithout     = "MD0501"
	codePolicyRejected     = "MD0601" // analyzepolicy.go
)

const (
	severityError   = "Error"
	severityWarning = "Warning"
	webhookName     = "meshdns-sidecar-injector"
)

// analyze runs every check, findings in a stable order.
func analyze(c *cluster) []finding {
	var out []finding
	for _, check := range []func(*cluster) []finding{checkWebhook, checkPodSecurity, checkPods, checkPolicies, checkQuarantine} {
		out = append(out, check(c)...)
	}
	slices.SortStableFunc(out, func(a, b finding) int {
		return strings.Compare(a.Code+a.Object, b.Code+b.Object)
	})
	return out
}

// checkWebhook: the webhook configuration exists and its caBundle verifies
// the certificate the webhook serves.
func checkWebhook(c *cluster) []finding {
	obj := "MutatingWebhookConfiguration " + webhookName
	if c.webhook == nil {
		return []finding{{codeNoWebhook, severityError, obj, "the webhook configuration does not exist: no pod is injected",
			"kubectl apply -k examples/kubernetes (or helm install meshdns charts/meshdns)"}}
	}
	var out []finding
	for _, w := range c.webhook.Webhooks {
		if len(w.ClientConfig.CABundle) == 0 {
			out = append(out, finding{codeEmptyCABundle, severityError, obj,
				fmt.Sprintf("webhook %s has an empty caBundle: the API server cannot verify the control plane, and pods are created uninjected (failurePolicy Ignore)", w.Name),
				"check the control plane is running and its log for \"caBundle\" (RBAC: get/update on this configuration); with cert-manager, its CA injector annotation"})
			continue
		}
		if c.certs == nil {
			continue
		}
		if err := verifies(w.ClientConfig.CABundle, c.certs.Data[corev1.TLSCertKey], c.now); err != nil {
			out = append(out, finding{codeStaleCABundle, severityError, obj,
				fmt.Sprintf("webhook %s: its caBundle does not verify the certificate in Secret %s/%s: %v", w.Name, c.certs.Namespace, c.certs.Name, err),
				"the control plane rewrites the caBundle within a minute; if it stays, restart it (kubectl -n " + c.system + " rollout restart deploy/meshdns-controlplane) and check its log"})
		}
	}
	return out
}

// verifies checks that certPEM chains to caPEM now.
func verifies(caPEM, certPEM []byte, now time.Time) error {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return fmt.Errorf("no certificate in the caBundle")
	}
	b, _ := pem.Decode(certPEM)
	if b == nil {
		return fmt.Errorf("no certificate in the Secret")
	}
	cert, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return err
	}
	_, err = cert.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	return err
}

// checkPodSecurity: namespaces that opted in but enforce a Pod Security
// level the init container breaks, which the webhook configuration skips
// (unless it is the CNI mode's, which has no such exclusion).
func checkPodSecurity(c *cluster) []finding {
	if c.webhook == nil || !excludesPodSecurity(c.webhook) {
		return nil
	}
	var out []finding
	for _, ns := range c.namespaces {
		level := ns.Labels["pod-security.kubernetes.io/enforce"]
		if ns.Labels[webhook.LabelInject] == "enabled" && (level == "baseline" || level == "restricted") {
			out = append(out, finding{codePodSecuritySkipped, severityWarning, "Namespace " + ns.Name,
				fmt.Sprintf("labelled %s=enabled but enforces Pod Security %q: the webhook skips it (the init container's NET_ADMIN would be rejected), so its pods are not injected", webhook.LabelInject, level),
				"use the CNI mode (kubectl apply -k examples/overlays/cni), or label the namespace pod-security.kubernetes.io/enforce=privileged"})
		}
	}
	return out
}

func excludesPodSecurity(mwc *admissionregistrationv1.MutatingWebhookConfiguration) bool {
	for _, w := range mwc.Webhooks {
		if w.NamespaceSelector == nil {
			continue
		}
		for _, e := range w.NamespaceSelector.MatchExpressions {
			if e.Key == "pod-security.kubernetes.io/enforce" {
				return true
			}
		}
	}
	return false
}

// Istio's numbers, as the webhook knows them.
var (
	istioPortsAnalyze = map[int]bool{15000: true, 15001: true, 15004: true, 15006: true, 15008: true, 15009: true, 15020: true, 15021: true, 15053: true, 15090: true}
	istioUIDAnalyze   = int64(1337)
)

// checkPods: injected pods beside Istio, agents on another image than the
// control plane's, CNI-mode pods on nodes without the plugin.
func checkPods(c *cluster) []finding {
	var want string
	if c.controlPlane != nil {
		for _, ct := range c.controlPlane.Spec.Template.Spec.Containers {
			if ct.Name == "controlplane" {
				want = ct.Image
			}
		}
	}
	cniNodes := map[string]bool{}
	for _, p := range c.cniPods {
		if p.Spec.NodeName != "" && podReady(&p) {
			cniNodes[p.Spec.NodeName] = true
		}
	}
	var out []finding
	for _, p := range c.pods {
		agent := agentOf(&p)
		if agent == nil {
			continue
		}
		obj := "Pod " + p.Namespace + "/" + p.Name
		if istio := istioProxyOf(&p); istio != nil {
			if dnsCapture(&p, istio) {
				out = append(out, finding{codeIstioDNSCapture, severityError, obj,
					"both meshdns and Istio's DNS capture redirect port 53: whichever rule comes first takes the queries",
					"turn Istio's DNS capture off for the pod (proxy.istio.io/config: ISTIO_META_DNS_CAPTURE \"false\") or opt the pod out of meshdns (meshdns.io/inject: \"false\")"})
			}
			if clash := clashes(agent); clash != "" {
				out = append(out, finding{codeIstioClash, severityError, obj,
					"the meshdns agent and Istio's sidecar clash: " + clash,
					"recreate the pod: the webhook moves the agent off Istio's numbers when Istio's sidecar is there first (template besideIstio); or set dnsPort, adminPort and proxyUID apart from Istio's in the template"})
			}
		}
		if want != "" && agent.Image != want {
			out = append(out, finding{codeAgentBehind, severityWarning, obj,
				fmt.Sprintf("agent image %s differs from the control plane's %s", agent.Image, want),
				"recreate the workload to get the current agent: kubectl -n " + p.Namespace + " rollout restart deploy/NAME"})
		}
		if _, ok := p.Annotations[cni.AnnotationRedirect]; ok && p.Spec.NodeName != "" && !cniNodes[p.Spec.NodeName] {
			out = append(out, finding{codeCNINodeWithout, severityError, obj,
				fmt.Sprintf("injected in CNI mode, but node %s runs no ready meshdns-cni pod: nothing redirects the pod's DNS to its agent", p.Spec.NodeName),
				"install the CNI DaemonSet (kubectl apply -k examples/overlays/cni) and check it tolerates that node; then recreate the pod"})
		}
	}
	return out
}

func agentOf(p *corev1.Pod) *corev1.Container {
	for _, cs := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for i := range cs {
			if cs[i].Name == webhook.AgentContainerName {
				return &cs[i]
			}
		}
	}
	return nil
}

func istioProxyOf(p *corev1.Pod) *corev1.Container {
	for _, cs := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for i := range cs {
			if cs[i].Name == "istio-proxy" {
				return &cs[i]
			}
		}
	}
	return nil
}

// dnsCapture reports whether Istio's DNS capture is on for the pod: its
// proxy config annotation or the sidecar's environment.
func dnsCapture(p *corev1.Pod, istio *corev1.Container) bool {
	cfg := p.Annotations["proxy.istio.io/config"]
	if i := strings.Index(cfg, "ISTIO_META_DNS_CAPTURE"); i >= 0 {
		rest := strings.ToLower(cfg[i:])
		if j := strings.IndexAny(rest, "\n,}"); j >= 0 {
			rest = rest[:j]
		}
		if strings.Contains(rest, "true") {
			return true
		}
	}
	for _, e := range istio.Env {
		if e.Name == "ISTIO_META_DNS_CAPTURE" && strings.EqualFold(e.Value, "true") {
			return true
		}
	}
	return false
}

// clashes says which of the agent's ports and ids are Istio's, or "".
func clashes(agent *corev1.Container) string {
	var out []string
	for i, a := range agent.Args {
		if (a == "--dns-addr" || a == "--admin-addr") && i+1 < len(agent.Args) {
			addr := agent.Args[i+1]
			port, err := strconv.Atoi(addr[strings.LastIndex(addr, ":")+1:])
			if err == nil && istioPortsAnalyze[port] {
				out = append(out, fmt.Sprintf("%s %s is Istio's port", a, addr))
			}
		}
	}
	if sc := agent.SecurityContext; sc != nil && sc.RunAsUser != nil && *sc.RunAsUser == istioUIDAnalyze {
		out = append(out, "uid 1337 is istio-proxy's (each proxy's traffic escapes the other's capture)")
	}
	return strings.Join(out, "; ")
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
