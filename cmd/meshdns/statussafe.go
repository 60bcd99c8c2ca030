package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
)

// Safe mode in status. A pod whose agent crash-loops is served by its
// supervisor in safe mode: no agent, so no stream to any replica, and the
// pod may even be ready (the supervisor forwards its queries). Only the
// agent's probe port says so: /healthz/ready answers "safe mode: <reason>"
// (200 while forwarding, 503 while refusing). status reads it for the
// injected pods no replica lists whose agent container runs, through the
// API server's pods/proxy subresource with the user's credentials: the
// control plane needs no new permission, the user needs get on pods/proxy
// (docs/operate.md).

// safeProbes bounds the probe ports read at once: each is a request the
// API server proxies to a pod.
const safeProbes = 8

// probeOutcome is what a pod's probe port said.
type probeOutcome struct {
	// SafeMode is the answer of a supervisor in safe mode ("safe mode:
	// <reason>", or "safe mode, refusing every query ..."), "" otherwise.
	SafeMode string
	// Err is why the port could not be read, or nil.
	Err error
}

// probeSafeMode reads the probe port of each pod (concurrently, bounded),
// keyed by namespace/name.
func probeSafeMode(ctx context.Context, k *kubeREST, pods []*corev1.Pod) map[string]probeOutcome {
	out := make(map[string]probeOutcome, len(pods))
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, safeProbes)
	for _, p := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			o := probePod(ctx, k, p)
			mu.Lock()
			out[p.Namespace+"/"+p.Name] = o
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

// probePod reads the agent's /healthz/ready through the API server. The
// request goes out on the REST client's HTTP client (its credentials),
// not through Do: a 503, which a refusing supervisor answers, comes back
// from Do as an error without its body.
func probePod(ctx context.Context, k *kubeREST, p *corev1.Pod) probeOutcome {
	port, ok := probePort(p)
	if !ok {
		return probeOutcome{Err: errors.New("the agent container has no HTTP readiness probe")}
	}
	u := k.core.Get().Namespace(p.Namespace).Resource("pods").Name(p.Name+":"+strconv.Itoa(port)).
		SubResource("proxy").Suffix("healthz", "ready").URL()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return probeOutcome{Err: fmt.Errorf("probe request: %w", err)}
	}
	res, err := k.core.Client.Do(req)
	if err != nil {
		return probeOutcome{Err: fmt.Errorf("get %s: %w", u.Path, err)}
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, 4<<10))
	if err != nil {
		return probeOutcome{Err: fmt.Errorf("read %s: %w", u.Path, err)}
	}
	switch {
	case res.StatusCode == http.StatusForbidden || res.StatusCode == http.StatusUnauthorized:
		return probeOutcome{Err: errProxyForbidden}
	case res.StatusCode != http.StatusOK && res.StatusCode != http.StatusServiceUnavailable:
		first, _, _ := strings.Cut(strings.TrimSpace(string(body)), "\n")
		return probeOutcome{Err: fmt.Errorf("%s: %s", res.Status, short(first, 200))}
	}
	return probeOutcome{SafeMode: safeModeAnswer(res.StatusCode, body)}
}

// safeModeAnswer is the safe-mode answer in a /healthz/ready response, or
// "" when the agent answered (or something else did).
func safeModeAnswer(code int, body []byte) string {
	if code != http.StatusOK && code != http.StatusServiceUnavailable {
		return ""
	}
	s := strings.TrimSpace(string(body))
	if !strings.HasPrefix(s, "safe mode") {
		return ""
	}
	return short(s, 300)
}

// errProxyForbidden is a pods/proxy request the user may not make.
var errProxyForbidden = errors.New("forbidden: reading it needs get on pods/proxy (docs/operate.md)")

// probePort is the port of the agent container's readiness probe.
func probePort(p *corev1.Pod) (int, bool) {
	c := agentOf(p)
	if c == nil || c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil {
		return 0, false
	}
	port := c.ReadinessProbe.HTTPGet.Port
	if port.StrVal == "" {
		return port.IntValue(), port.IntValue() > 0
	}
	for _, cp := range c.Ports {
		if cp.Name == port.StrVal {
			return int(cp.ContainerPort), true
		}
	}
	return 0, false
}

// agentRunning reports whether the pod's agent container runs: only then
// may its supervisor be in safe mode.
func agentRunning(p *corev1.Pod) bool {
	c := agentOf(p)
	if c == nil {
		return false
	}
	for _, ss := range [][]corev1.ContainerStatus{p.Status.InitContainerStatuses, p.Status.ContainerStatuses} {
		for _, st := range ss {
			if st.Name == c.Name {
				return st.State.Running != nil
			}
		}
	}
	return false
}

// safeModeReason is the unsynced reason of a pod whose probe port was
// read, or "" to keep what the pod's status says.
func safeModeReason(o probeOutcome, found bool) string {
	switch {
	case !found:
		return ""
	case o.SafeMode != "":
		return "agent in " + o.SafeMode + " (its supervisor serves the pod's DNS; no agent, so no stream)"
	case o.Err != nil:
		return fmt.Sprintf("probe port not read: %v", o.Err)
	}
	return ""
}
