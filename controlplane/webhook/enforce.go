package webhook

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/meshdns/meshdns/cni"
)

// Policies tells the webhook which pods an enforcing DNS policy selects
// (in the control plane, policysource.Store). Both methods read a cache
// and are safe for concurrent use.
type Policies interface {
	// Enforced reports whether a policy in Enforce mode selects a pod of
	// namespace with podLabels.
	Enforced(namespace string, podLabels map[string]string) bool
	// EnforcedIn reports whether namespace has a policy in Enforce mode,
	// whatever it selects: asked about a pod whose labels cannot be read.
	EnforcedIn(namespace string) bool
}

func (w *Webhook) enforcedOn(namespace string, podLabels map[string]string) bool {
	return w.cfg.Policies != nil && w.cfg.Policies.Enforced(namespace, podLabels)
}

func (w *Webhook) enforcedIn(namespace string) bool {
	return w.cfg.Policies != nil && w.cfg.Policies.EnforcedIn(namespace)
}

// Where an enforcing DNS policy selects a pod, its agent is the only
// process of the pod whose DNS is not redirected: the redirect exempts the
// proxy's uid and gid (the owner of the socket, as the kernel sees it).
// The pod's author must then not be able to take that identity, nor undo
// the redirect, nor pass off a pod as injected. checkEnforceable refuses
// every container of the author's that could, with what to set instead.
// What it asks of such a container is close to Pod Security "restricted"
// plus explicit ids: an image's USER (or /etc/passwd group) is invisible
// at admission, so a container that does not name its uid and gid could
// be the proxy.

// dangerousCaps are the capabilities that change netfilter or the
// process's ids.
var dangerousCaps = []corev1.Capability{"ALL", "NET_ADMIN", "SYS_ADMIN", "SETUID", "SETGID"}

// checkEnforceable returns why pod cannot be let in under an enforcing
// policy with template t, or nil.
func (t *Template) checkEnforceable(pod *corev1.Pod) error {
	psc := pod.Spec.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	if slices.Contains(psc.SupplementalGroups, t.ProxyGID) || (psc.FSGroup != nil && *psc.FSGroup == t.ProxyGID) {
		return fmt.Errorf("the pod's supplementalGroups or fsGroup hold the meshdns proxy's gid %d, which an enforcing DNS policy reserves for the agent", t.ProxyGID)
	}
	agent, init := t.agentContainer(), t.initContainer()
	var sawAgent, sawInit bool
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			c := &cs[i]
			switch {
			case sameIdentity(c, &agent):
				sawAgent = true
				continue
			case !t.CNI && sameIdentity(c, &init):
				sawInit = true
				continue
			}
			if err := t.checkContainer(c, psc); err != nil {
				return fmt.Errorf("container %q: %w", c.Name, err)
			}
		}
	}
	for i := range pod.Spec.EphemeralContainers {
		c := (*corev1.Container)(&pod.Spec.EphemeralContainers[i].EphemeralContainerCommon)
		if err := t.checkContainer(c, psc); err != nil {
			return fmt.Errorf("ephemeral container %q: %w", c.Name, err)
		}
	}
	if _, marked := pod.Annotations[AnnotationStatus]; marked || sawAgent || sawInit {
		redirect := sawInit || t.CNI && pod.Annotations[cni.AnnotationRedirect] == t.annotations()[cni.AnnotationRedirect]
		if !sawAgent || !redirect {
			return errors.New("the pod is marked as injected by meshdns but does not carry the agent and the redirect this webhook injects; an enforcing DNS policy selects it")
		}
	}
	return nil
}

// sameIdentity reports whether c is the container want as far as what it
// runs and as whom: another webhook may add environment or mounts, not
// change these.
func sameIdentity(c, want *corev1.Container) bool {
	return c.Name == want.Name && c.Image == want.Image && slices.Equal(c.Command, want.Command) &&
		slices.Equal(c.Args, want.Args) && reflect.DeepEqual(c.SecurityContext, want.SecurityContext)
}

// checkContainer checks one container of the pod's author.
func (t *Template) checkContainer(c *corev1.Container, psc *corev1.PodSecurityContext) error {
	sc := c.SecurityContext
	if sc == nil {
		sc = &corev1.SecurityContext{}
	}
	uid, gid := cmpOr(sc.RunAsUser, psc.RunAsUser), cmpOr(sc.RunAsGroup, psc.RunAsGroup)
	switch {
	case uid == nil || gid == nil:
		return fmt.Errorf("set runAsUser and runAsGroup (container or pod securityContext): under an enforcing DNS policy the image's own user or group could be the meshdns proxy's (%d:%d), whose DNS is not redirected", t.ProxyUID, t.ProxyGID)
	case *uid == t.ProxyUID || *gid == t.ProxyGID:
		return fmt.Errorf("runs as %d:%d, the meshdns proxy's uid or gid (%d:%d), whose DNS is not redirected; an enforcing DNS policy reserves them for the agent", *uid, *gid, t.ProxyUID, t.ProxyGID)
	case sc.Privileged != nil && *sc.Privileged:
		return errors.New("privileged: it could undo the DNS redirect an enforcing DNS policy relies on")
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		return errors.New("set allowPrivilegeEscalation: false: a setuid program could take the meshdns proxy's uid under an enforcing DNS policy")
	}
	if sc.Capabilities != nil {
		for _, c := range sc.Capabilities.Add {
			if slices.Contains(dangerousCaps, normalCap(c)) {
				return fmt.Errorf("adds capability %s, which could take the meshdns proxy's ids or undo the DNS redirect under an enforcing DNS policy", c)
			}
		}
	}
	if *uid == 0 && !dropsIDChange(sc.Capabilities) {
		return errors.New("runs as root without dropping SETUID and SETGID (or ALL): it could take the meshdns proxy's uid under an enforcing DNS policy")
	}
	return nil
}

func dropsIDChange(caps *corev1.Capabilities) bool {
	if caps == nil {
		return false
	}
	drops := func(c corev1.Capability) bool {
		return slices.ContainsFunc(caps.Drop, func(d corev1.Capability) bool { return normalCap(d) == c })
	}
	return drops("ALL") || drops("SETUID") && drops("SETGID")
}

// normalCap spells a capability as Kubernetes documents it: the container
// runtimes also take "cap_net_admin" for NET_ADMIN.
func normalCap(c corev1.Capability) corev1.Capability {
	return corev1.Capability(strings.TrimPrefix(strings.ToUpper(string(c)), "CAP_"))
}

func cmpOr[T any](a, b *T) *T {
	if a != nil {
		return a
	}
	return b
}
