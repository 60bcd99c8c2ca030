package webhook

import (
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Names the webhook puts into pods; the agent and init container names also
// mark a pod as injected.
const (
	// AnnotationInject is the pod's opt-in ("true") or opt-out ("false").
	AnnotationInject = "meshdns.io/inject"
	// LabelInject on a namespace ("enabled") sends all its pods to /inject;
	// on a pod ("true" or "false") it opts in or out like the annotation,
	// which wins when both are set.
	LabelInject = "meshdns.io/inject"
	// AnnotationStatus marks an injected pod.
	AnnotationStatus = "meshdns.io/status"

	InitContainerName  = "meshdns-init"
	AgentContainerName = "meshdns-agent"
	StateVolumeName    = "meshdns-state"
	probePortName      = "meshdns-probes"
	// IdentityVolumeName holds what the agent presents to and trusts of
	// the control plane: the pod's projected ServiceAccount token and the
	// control plane's CA.
	IdentityVolumeName = "meshdns-identity"
	// AnnotationCA records the control plane's CA bundle at injection; the
	// identity volume projects it (downward API) only when the
	// namespace's CAConfigMapName ConfigMap could not be made.
	AnnotationCA = "meshdns.io/control-plane-ca"
	identityDir  = "/var/run/secrets/meshdns"
	tokenFile    = "token"
	caFile       = "ca.crt"
)

// policy is what the webhook path says about the pod's namespace.
type policy uint8

const (
	// namespaceEnabled: the namespace opted in; inject unless the pod opts
	// out.
	namespaceEnabled policy = iota
	// annotationOnly: the namespace did not opt in; inject only pods that
	// opt in.
	annotationOnly
)

// skipReason says why a pod is left alone; the values are metric labels.
type skipReason string

const (
	inject          skipReason = ""
	skipOptOut      skipReason = "opt_out"
	skipNotOptedIn  skipReason = "not_opted_in"
	skipHostNetwork skipReason = "host_network"
	skipInjected    skipReason = "already_injected"
)

// decide says whether pod is to be injected under pol; enforced says an
// enforcing DNS policy selects it, which opts it in on either path (its
// opt-out is then refused by the caller).
func decide(pod *corev1.Pod, pol policy, enforced bool) skipReason {
	if injected(pod) {
		return skipInjected
	}
	// A hostNetwork pod shares the node's network namespace: the init
	// container would rewrite the node's iptables.
	if pod.Spec.HostNetwork {
		return skipHostNetwork
	}
	v, ok := pod.Annotations[AnnotationInject]
	on, err := strconv.ParseBool(strings.TrimSpace(v))
	if !ok || err != nil {
		// Labels are what workload templates and policy tools set most
		// easily; the annotation, when it says something, wins.
		v, ok = pod.Labels[LabelInject]
		on, err = strconv.ParseBool(strings.TrimSpace(v))
	}
	switch {
	case ok && err == nil && !on:
		return skipOptOut
	case ok && err == nil && on:
		return inject
	case pol == namespaceEnabled || enforced:
		return inject
	default:
		return skipNotOptedIn
	}
}

// injected reports whether pod carries any trace of an earlier injection.
// Checking the containers as well as the annotation keeps the webhook
// idempotent even when something stripped the annotation.
func injected(pod *corev1.Pod) bool {
	if _, ok := pod.Annotations[AnnotationStatus]; ok {
		return true
	}
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range cs {
			if c.Name == InitContainerName || c.Name == AgentContainerName {
				return true
			}
		}
	}
	return false
}

// initContainer runs `meshdns iptables apply` once, as root with only the
// capabilities its backend needs.
func (t *Template) initContainer() corev1.Container {
	args := []string{
		"iptables", "apply",
		"--proxy-uid", strconv.FormatInt(t.ProxyUID, 10),
		"--proxy-gid", strconv.FormatInt(t.ProxyGID, 10),
		"--proxy-port", strconv.Itoa(int(t.DNSPort)),
	}
	// The native backend (what auto picks in the meshdns image, which
	// ships no iptables binaries) speaks netlink: NET_ADMIN only and
	// nothing written to disk. The iptables binaries open a raw socket
	// (NET_RAW) and take the lock file /run/xtables.lock.
	caps, readOnlyRoot := []corev1.Capability{"NET_ADMIN"}, true
	if binaryBackend(t.IptablesArgs) {
		caps, readOnlyRoot = []corev1.Capability{"NET_ADMIN", "NET_RAW"}, false
	}
	return corev1.Container{
		Name:            InitContainerName,
		Image:           t.Image,
		ImagePullPolicy: t.ImagePullPolicy,
		Command:         append([]string(nil), t.Command...),
		Args:            append(args, t.IptablesArgs...),
		Resources:       *t.InitResources.DeepCopy(),
		SecurityContext: &corev1.SecurityContext{
			// Root is needed to change the pod's netfilter tables.
			RunAsUser:                ptr(int64(0)),
			RunAsGroup:               ptr(int64(0)),
			RunAsNonRoot:             ptr(false),
			Privileged:               ptr(false),
			AllowPrivilegeEscalation: ptr(false),
			ReadOnlyRootFilesystem:   ptr(readOnlyRoot),
			Capabilities:             &corev1.Capabilities{Add: caps, Drop: []corev1.Capability{"ALL"}},
			SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
	}
}

// binaryBackend reports whether args pick one of the iptables binaries'
// backends (--backend legacy or nft; the last --backend wins, as in Go's
// flag package).
func binaryBackend(args []string) bool {
	backend := ""
	for i, a := range args {
		a = strings.TrimLeft(a, "-")
		switch {
		case a == "backend" && i+1 < len(args):
			backend = args[i+1]
		case strings.HasPrefix(a, "backend="):
			backend = strings.TrimPrefix(a, "backend=")
		}
	}
	return backend == "legacy" || backend == "nft"
}

// agentContainer is the native sidecar: an init container with
// restartPolicy Always starts before the application's containers, keeps
// running beside them and stops after them (KEP-753, GA in 1.33, on by
// default since 1.29).
func (t *Template) agentContainer() corev1.Container {
	args := []string{"agent"}
	if t.supervised() {
		args = append(args, "--supervise")
	}
	args = append(args,
		"--control-plane", t.ControlPlane,
		"--cluster-domain", t.ClusterDomain,
		"--state-dir", t.StateDir,
		"--dns-addr", "127.0.0.1:"+strconv.Itoa(int(t.DNSPort)),
		// The pod's annotations (podinfo.go): its query log setting.
		"--pod-annotations", podInfoDir+"/"+annotationsFile,
		// Debug endpoints on loopback; the kubelet and Prometheus get the
		// probe port on the pod IP.
		"--admin-addr", "127.0.0.1:"+strconv.Itoa(int(t.AdminPort)),
		"--probe-addr", "0.0.0.0:"+strconv.Itoa(int(t.ProbePort)),
	)
	if t.secure() {
		args = append(args, "--ca-cert", identityDir+"/"+caFile, "--token-file", identityDir+"/"+tokenFile)
	}
	if t.IPv6 {
		args = append(args, "--dns-addr", "[::1]:"+strconv.Itoa(int(t.DNSPort)))
	}
	ready := &corev1.Probe{
		ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
			Path: "/healthz/ready",
			Port: intstr.FromInt32(t.ProbePort),
		}},
		PeriodSeconds:    2,
		TimeoutSeconds:   1,
		FailureThreshold: 3,
	}
	c := corev1.Container{
		Name:            AgentContainerName,
		Image:           t.Image,
		ImagePullPolicy: t.ImagePullPolicy,
		Command:         append([]string(nil), t.AgentCommand...),
		Args:            append(args, t.AgentArgs...),
		RestartPolicy:   ptr(corev1.ContainerRestartPolicyAlways),
		Env: []corev1.EnvVar{
			fieldEnv("POD_NAME", "metadata.name"),
			fieldEnv("POD_NAMESPACE", "metadata.namespace"),
			// The Go runtime collects harder as the heap nears the
			// container's memory limit instead of being OOM-killed
			// above it (a burst of queries to a slow upstream).
			{Name: "GOMEMLIMIT", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{
				ContainerName: AgentContainerName, Resource: "limits.memory",
			}}},
		},
		Ports: []corev1.ContainerPort{{
			Name:          probePortName,
			ContainerPort: t.ProbePort,
			Protocol:      corev1.ProtocolTCP,
		}},
		ReadinessProbe: ready,
		// Liveness asks only that the agent's HTTP server answers (not that
		// it has a table: a control plane outage must not restart every
		// agent); under the supervisor a crashed agent is back long before
		// three missed checks.
		LivenessProbe: &corev1.Probe{
			ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Path: "/healthz/live",
				Port: intstr.FromInt32(t.ProbePort),
			}},
			PeriodSeconds:    10,
			TimeoutSeconds:   3,
			FailureThreshold: 3,
		},
		Resources: *t.AgentResources.DeepCopy(),
		VolumeMounts: []corev1.VolumeMount{{
			Name:      StateVolumeName,
			MountPath: t.StateDir,
		}, {Name: PodInfoVolumeName, MountPath: podInfoDir, ReadOnly: true}},
		SecurityContext: &corev1.SecurityContext{
			// The uid/gid the iptables rules exempt: the agent's own
			// upstream queries must not come back to it.
			RunAsUser:                ptr(t.ProxyUID),
			RunAsGroup:               ptr(t.ProxyGID),
			RunAsNonRoot:             ptr(true),
			Privileged:               ptr(false),
			AllowPrivilegeEscalation: ptr(false),
			ReadOnlyRootFilesystem:   ptr(true),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			// With the settings above, what the restricted Pod Security
			// level asks of every container.
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
	}
	for _, e := range t.AgentEnv {
		c.Env = append(c.Env, *e.DeepCopy())
	}
	if t.secure() {
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: IdentityVolumeName, MountPath: identityDir, ReadOnly: true})
	}
	if t.HoldApplicationUntilReady {
		// The kubelet starts the next container once a sidecar's startup
		// probe passes; 150 x 2s gives the control plane five minutes.
		start := ready.DeepCopy()
		start.FailureThreshold = 150
		c.StartupProbe = start
	}
	return c
}

// stateVolume is small and in memory: the agent keeps its last table there
// across container restarts, never on the node's disk.
func (t *Template) stateVolume() corev1.Volume {
	return corev1.Volume{
		Name: StateVolumeName,
		VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
			Medium:    corev1.StorageMediumMemory,
			SizeLimit: ptr(t.StateSizeLimit.DeepCopy()),
		}},
	}
}

// supervised reports whether the agent runs under its supervisor (the
// default; an unset field, as in a Template built in Go, counts as on).
func (t *Template) supervised() bool { return t.Supervise == nil || *t.Supervise }

// secure reports whether the agent talks TLS to the control plane and
// presents its token: whenever the webhook knows the control plane's CA,
// unless the template asks for plaintext.
func (t *Template) secure() bool { return !t.Plaintext && len(t.caBundle) > 0 }

// identityVolume projects the pod's ServiceAccount token for the control
// plane's audience (short-lived, bound to the pod, rotated by the kubelet)
// and the control plane's CA: from the namespace's CAConfigMapName
// ConfigMap, which the kubelet keeps current in a running pod, or, when
// the webhook could not make that ConfigMap, from the pod's annotation
// (fixed at admission: a CA rotation then needs a new pod).
func (t *Template) identityVolume() corev1.Volume {
	ca := corev1.VolumeProjection{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{
		Path:     caFile,
		FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.annotations['" + AnnotationCA + "']"},
	}}}}
	if t.caConfigMap {
		ca = corev1.VolumeProjection{ConfigMap: &corev1.ConfigMapProjection{
			LocalObjectReference: corev1.LocalObjectReference{Name: CAConfigMapName},
			Items:                []corev1.KeyToPath{{Key: caFile, Path: caFile}},
		}}
	}
	return corev1.Volume{
		Name: IdentityVolumeName,
		VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			DefaultMode: ptr(int32(0o444)),
			Sources: []corev1.VolumeProjection{
				{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
					Audience: t.TokenAudience, ExpirationSeconds: ptr(t.TokenExpirationSeconds), Path: tokenFile,
				}},
				ca,
			},
		}},
	}
}

func fieldEnv(name, path string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{
		FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: path},
	}}
}

func ptr[T any](v T) *T { return &v }
