package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/meshdns/meshdns/cni"
)

// runCNIPlugin is the binary called as meshdns-cni by the container runtime:
// the CNI protocol instead of subcommands. It returns the exit status.
func runCNIPlugin(ctx context.Context, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) int {
	log := slog.New(slog.NewTextHandler(stderr, nil)).With("component", "meshdns-cni")
	p, err := cni.New(cni.Config{Pods: podAnnotations, Logger: log})
	if err == nil {
		var in []byte
		if in, err = io.ReadAll(stdin); err == nil {
			// The runtime gives a plugin no deadline: the pod lookup has
			// its own (cni.DefaultLookupTimeout), this bounds the rest.
			ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			err = p.Exec(ctx, cni.ArgsFromEnv(getenv), in, stdout)
		}
	}
	if err != nil {
		cni.WriteError(stdout, err)
		return 1
	}
	return 0
}

// podAnnotations reads one pod's metadata with the plugin's kubeconfig: a
// plain GET, since the plugin runs once per pod and needs no informer.
func podAnnotations(ctx context.Context, kubeconfig, namespace, name string) (map[string]string, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
	}
	cfg.UserAgent = "meshdns-cni"
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	u := fmt.Sprintf("%s/api/v1/namespaces/%s/pods/%s", cfg.Host, url.PathEscape(namespace), url.PathEscape(name))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound:
		return nil, nil
	case http.StatusUnauthorized:
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("%w (%s: %s)", cni.ErrCredentialRejected, resp.Status, b)
	default:
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("%s: %s", resp.Status, b)
	}
	var pod struct {
		Metadata struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 4<<20)).Decode(&pod); err != nil {
		return nil, fmt.Errorf("decode pod: %w", err)
	}
	return pod.Metadata.Annotations, nil
}
