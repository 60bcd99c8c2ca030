package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshdns/meshdns/cmd/internal/cli"
)

func init() {
	cli.Register("analyze", cli.Command{
		Summary: "check a live cluster for what breaks meshdns: webhook CA, Pod Security, Istio clashes, old agents, CNI nodes, refused DNSPolicy",
		Usage: `usage: meshdns analyze [--kubeconfig FILE] [--system-namespace meshdns-system] [--output table|json]

Reads the cluster through the API server, as kubectl does, and reports each problem with a code, a message
and a fix, like istioctl analyze. Exits 0 when nothing is an Error (warnings are printed), 1 when an Error
is found or the API server cannot be read, 2 for a mistake in the command line.`,
		Run: runAnalyze,
	})
}

func runAnalyze(ctx context.Context, args []string, stdout, _ io.Writer) error {
	fs := flag.NewFlagSet("analyze", flag.ContinueOnError)
	fs.SetOutput(stdout)
	f := newFleetFlags(fs, fleetOpts{timeout: 30 * time.Second})
	if err := f.parse(fs, args); err != nil {
		return err
	}
	rc, err := f.restConfig()
	if err != nil {
		return err
	}
	k, err := newKubeREST(rc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	c, err := readCluster(ctx, k, f.system)
	if err != nil {
		return err
	}
	c.quarantine = readQuarantine(ctx, rc, k, f.system)
	findings := analyze(c)
	if f.output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if findings == nil {
			findings = []finding{}
		}
		if err := enc.Encode(findings); err != nil {
			return err
		}
	} else {
		if len(findings) == 0 {
			fmt.Fprintln(stdout, "No problems found.")
		}
		for _, f := range findings {
			fmt.Fprintf(stdout, "%s [%s] (%s) %s\n    fix: %s\n", f.Severity, f.Code, f.Object, f.Message, f.Fix)
		}
	}
	errs := 0
	for _, f := range findings {
		if f.Severity == severityError {
			errs++
		}
	}
	if errs > 0 {
		return fmt.Errorf("analyze: %d errors", errs)
	}
	return nil
}

// readCluster reads what the checks look at. A webhook configuration, a
// Secret or a Deployment that does not exist is nil, not an error.
func readCluster(ctx context.Context, k *kubeREST, system string) (*cluster, error) {
	c := &cluster{now: time.Now(), system: system}
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
	err := k.get(ctx, k.admission, "", "mutatingwebhookconfigurations", webhookName, mwc)
	switch {
	case err == nil:
		c.webhook = mwc
	case !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("read webhook configuration: %w", err)
	}
	secret := &corev1.Secret{}
	err = k.get(ctx, k.core, system, "secrets", "meshdns-webhook-certs", secret)
	switch {
	case err == nil:
		c.certs = secret
	case !apierrors.IsNotFound(err) && !apierrors.IsForbidden(err):
		return nil, fmt.Errorf("read webhook certificate: %w", err)
	}
	deploy := &appsv1.Deployment{}
	err = k.get(ctx, k.apps, system, "deployments", "meshdns-controlplane", deploy)
	switch {
	case err == nil:
		c.controlPlane = deploy
	case !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("read control plane: %w", err)
	}
	var nss corev1.NamespaceList
	if err := k.list(ctx, k.core, "", "namespaces", metav1.ListOptions{}, &nss); err != nil {
		return nil, fmt.Errorf("list namespaces: %w", err)
	}
	c.namespaces = nss.Items
	opts := metav1.ListOptions{Limit: 500}
	for {
		var pods corev1.PodList
		if err := k.list(ctx, k.core, "", "pods", opts, &pods); err != nil {
			return nil, fmt.Errorf("list pods: %w", err)
		}
		for _, p := range pods.Items {
			if agentOf(&p) != nil {
				c.pods = append(c.pods, p)
			}
		}
		if opts.Continue = pods.Continue; opts.Continue == "" {
			break
		}
	}
	var cni corev1.PodList
	if err := k.list(ctx, k.core, system, "pods", metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=meshdns-cni"}, &cni); err != nil {
		return nil, fmt.Errorf("list CNI pods: %w", err)
	}
	c.cniPods = cni.Items
	if c.policies, err = readPolicies(ctx, k); err != nil {
		return nil, err
	}
	return c, nil
}
