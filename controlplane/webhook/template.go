package webhook

import (
	"errors"
	"fmt"
	"math"
	"os"
	"reflect"
	"strings"
	"unicode"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"

	"github.com/meshdns/meshdns/internal/dnsname"
)

// Template says what an injected pod gets. Every zero field takes the value
// of the template it is layered on (see over), ending with DefaultTemplate.
// It is read from the template file with the JSON field names below (YAML
// or JSON), so image, resources and ports change without a rebuild.
type Template struct {
	// Image of both injected containers; the one meshdns image serves the
	// init container, the sidecar and the control plane.
	Image string `json:"image,omitempty"`
	// ImagePullPolicy of both containers; zero means IfNotPresent.
	ImagePullPolicy corev1.PullPolicy `json:"imagePullPolicy,omitempty"`
	// Command runs the meshdns binary of the image in the init container
	// (`iptables apply`); zero means ["meshdns"].
	Command []string `json:"command,omitempty"`
	// AgentCommand runs the agent in the sidecar; zero means
	// ["meshdns-agent"], the image's smaller build of the same command
	// (agent and version only), whose pages every pod maps. An image
	// without it takes ["meshdns"]: the full binary runs the agent too.
	AgentCommand []string `json:"agentCommand,omitempty"`
	// ControlPlane is the gRPC address the agent dials (host:port).
	ControlPlane string `json:"controlPlane,omitempty"`
	// ClusterDomain is the agent's --cluster-domain, the zone its table is
	// authoritative for; zero means the control plane's own
	// (--cluster-domain), else cluster.local.
	ClusterDomain string `json:"clusterDomain,omitempty"`
	// ProxyUID and ProxyGID run the agent; the iptables rules let traffic
	// of this uid/gid through unredirected. Zero means 1337 (0 would exempt
	// every root process in the pod from the redirect).
	ProxyUID int64 `json:"proxyUID,omitempty"`
	ProxyGID int64 `json:"proxyGID,omitempty"`
	// DNSPort the agent listens on at 127.0.0.1 and the redirect targets;
	// zero means 15053.
	DNSPort int32 `json:"dnsPort,omitempty"`
	// IPv6 makes the agent also listen on [::1]:DNSPort, where the
	// redirect sends DNS for IPv6 nameservers. Turn it on in clusters whose
	// pods have IPv6 nameservers (IPv6 and dual-stack DNS); off by default
	// because binding ::1 fails in pods without IPv6.
	IPv6 bool `json:"ipv6,omitempty"`
	// AdminPort of the agent's admin HTTP server, on 127.0.0.1 only
	// (debug endpoints; kubectl exec or port-forward reach it). Zero means
	// 15020.
	AdminPort int32 `json:"adminPort,omitempty"`
	// ProbePort serves readiness, liveness and /metrics on the pod IP, for
	// the kubelet and Prometheus, and nothing else. Zero means 15121 (not
	// Istio's 15020 and 15021).
	ProbePort int32 `json:"probePort,omitempty"`
	// TokenAudience of the projected ServiceAccount token the agent
	// presents to the control plane; zero means "meshdns" (the control
	// plane's --token-audience). TokenExpirationSeconds is its lifetime;
	// zero means 600, the shortest the API server issues; the kubelet
	// rotates it at 80%.
	TokenAudience          string `json:"tokenAudience,omitempty"`
	TokenExpirationSeconds int64  `json:"tokenExpirationSeconds,omitempty"`
	// Plaintext makes agents dial the control plane without TLS and so
	// without their token (a token is never sent in plaintext): only for a
	// control plane run with --insecure-allow-unauthenticated.
	Plaintext bool `json:"plaintext,omitempty"`
	// StateDir is where the state volume is mounted in the agent; zero
	// means /var/run/meshdns.
	StateDir string `json:"stateDir,omitempty"`
	// StateSizeLimit of the in-memory state emptyDir; zero means 16Mi:
	// during an update the state file and the pending next one exist
	// together, about 2 x 5.8 MB at 100,000 names.
	StateSizeLimit *resource.Quantity `json:"stateSizeLimit,omitempty"`
	// AgentResources and InitResources replace the defaults as a whole when
	// they set anything (requests, limits or claims).
	AgentResources corev1.ResourceRequirements `json:"agentResources,omitempty"`
	InitResources  corev1.ResourceRequirements `json:"initResources,omitempty"`
	// Supervise runs the agent under `meshdns agent --supervise`: a small
	// parent process holds the DNS sockets and restarts a crashed or
	// OOM-killed agent on them at once, so the pod's queries wait in the
	// socket queue for a few hundred milliseconds instead of for the
	// resolver's timeout (behind the redirect the kernel's refusal does not
	// reach the application). Nil means true; false runs the agent alone and
	// leaves restarts to the kubelet.
	Supervise *bool `json:"supervise,omitempty"`
	// AgentArgs and IptablesArgs are appended to the generated arguments
	// (a later flag wins in Go's flag package).
	AgentArgs    []string `json:"agentArgs,omitempty"`
	IptablesArgs []string `json:"iptablesArgs,omitempty"`
	// AgentEnv is appended to the agent container's environment, after
	// the variables the webhook sets (name with value or valueFrom, as in
	// a pod spec). A name meshdns sets or reads in its place is refused
	// (see reservedAgentEnv).
	AgentEnv []corev1.EnvVar `json:"agentEnv,omitempty"`
	// HoldApplicationUntilReady adds a startup probe to the agent, so the
	// kubelet starts the application containers only after the agent has
	// its first name table. Off by default: with it, pods do not start
	// while the control plane is unreachable.
	HoldApplicationUntilReady bool `json:"holdApplicationUntilReady,omitempty"`
	// CNI leaves the redirect to the meshdns CNI plugin on the node: no
	// init container (so no NET_ADMIN in the pod, which the baseline and
	// restricted Pod Security levels forbid), and the annotation the plugin
	// reads instead. Turn it on only where the plugin's DaemonSet runs, or
	// pods get an agent that nothing sends DNS to. IptablesArgs and
	// InitResources are then unused.
	CNI bool `json:"cni,omitempty"`
	// BesideIstio are the numbers an agent takes in a pod that has Istio's
	// sidecar, in place of those of the fields above that are Istio's own
	// (see istio.go). Zero fields mean 15153, 15120 and uid/gid 1553.
	BesideIstio IstioNumbers `json:"besideIstio,omitzero"`

	// caBundle is the control plane's CA at injection time
	// (Config.CABundle); set per request, never read from the file.
	caBundle []byte
	// caConfigMap: the pod's namespace has the CAConfigMapName ConfigMap
	// with caBundle; set per request.
	caConfigMap bool
	// shifted lists the numbers moved off Istio's for this pod (see
	// besideIstio), or ""; set per request.
	shifted string
}

// DefaultTemplate is the bottom layer of every template.
func DefaultTemplate() Template {
	size := resource.MustParse("16Mi")
	return Template{
		Image:                  "ghcr.io/meshdns/meshdns:latest",
		ImagePullPolicy:        corev1.PullIfNotPresent,
		Command:                []string{"meshdns"},
		AgentCommand:           []string{"meshdns-agent"},
		ControlPlane:           "meshdns-controlplane.meshdns-system.svc:15012",
		ClusterDomain:          "cluster.local",
		ProxyUID:               1337,
		ProxyGID:               1337,
		DNSPort:                15053,
		AdminPort:              15020,
		ProbePort:              15121,
		TokenAudience:          "meshdns",
		TokenExpirationSeconds: 600,
		StateDir:               "/var/run/meshdns",
		StateSizeLimit:         &size,
		Supervise:              ptr(true),
		BesideIstio:            IstioNumbers{DNSPort: 15153, AdminPort: 15120, ProxyUID: 1553, ProxyGID: 1553},
		AgentResources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{
				corev1.ResourceCPU:    resource.MustParse("10m"),
				corev1.ResourceMemory: resource.MustParse("32Mi"),
			},
			Limits: corev1.ResourceList{
				corev1.ResourceMemory: resource.MustParse("128Mi"),
			},
		},
		InitResources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{
				corev1.ResourceCPU:    resource.MustParse("10m"),
				corev1.ResourceMemory: resource.MustParse("16Mi"),
			},
			Limits: corev1.ResourceList{
				corev1.ResourceMemory: resource.MustParse("64Mi"),
			},
		},
	}
}

// over returns t with every zero field taken from base (see layer).
func (t Template) over(base Template) Template {
	layer(reflect.ValueOf(&t).Elem(), reflect.ValueOf(base))
	return t
}

// layer sets each zero exported field of the struct t to base's, the one
// rule by which a template takes the defaults of the layer below: so a
// field added to Template is layered without a line here. Zero is what
// the file leaves out or writes empty: "", 0, false, nil, and a list or
// map without elements (`command: []` falls back too). A field of a struct
// type of this package (IstioNumbers) is layered field by field; one of
// another package's struct type (resource requirements) is taken as a
// whole when it sets nothing. Unexported fields are set per request and
// keep t's.
func layer(t, base reflect.Value) {
	for i := range t.NumField() {
		f, sf := t.Field(i), t.Type().Field(i)
		switch {
		case !sf.IsExported():
		case f.Kind() == reflect.Struct && sf.Type.PkgPath() == templatePkg:
			layer(f, base.Field(i))
		case isEmpty(f):
			f.Set(base.Field(i))
		}
	}
}

// templatePkg is this package's import path, whose struct types layer
// field by field.
var templatePkg = reflect.TypeFor[Template]().PkgPath()

func isEmpty(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Slice, reflect.Map:
		return v.Len() == 0
	}
	return v.IsZero()
}

// validate rejects templates that would produce a pod the API server
// refuses or an agent the redirect loops through.
func (t Template) validate() error {
	var errs []error
	if t.Image == "" {
		errs = append(errs, errors.New("image is empty"))
	}
	if t.ControlPlane == "" {
		errs = append(errs, errors.New("controlPlane is empty"))
	}
	if err := dnsname.Check(t.ClusterDomain, false); err != nil || strings.Trim(t.ClusterDomain, ".") == "" {
		errs = append(errs, fmt.Errorf("clusterDomain %q is not a domain name", t.ClusterDomain))
	}
	if err := t.BesideIstio.validate(t.ProbePort); err != nil {
		errs = append(errs, fmt.Errorf("besideIstio: %w", err))
	}
	// The API server accepts ids up to 2^31-1 (runAsUser validation).
	if t.ProxyUID <= 0 || t.ProxyGID <= 0 || t.ProxyUID > math.MaxInt32 || t.ProxyGID > math.MaxInt32 {
		errs = append(errs, fmt.Errorf("proxyUID %d and proxyGID %d must be positive", t.ProxyUID, t.ProxyGID))
	}
	if strings.ContainsFunc(t.Image, unicode.IsSpace) {
		errs = append(errs, fmt.Errorf("image %q contains white space", t.Image))
	}
	if t.StateSizeLimit != nil && t.StateSizeLimit.Sign() <= 0 {
		errs = append(errs, fmt.Errorf("stateSizeLimit %s must be positive", t.StateSizeLimit))
	}
	for name, r := range map[string]corev1.ResourceRequirements{"agentResources": t.AgentResources, "initResources": t.InitResources} {
		if err := validateResources(r); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
	}
	for name, p := range map[string]int32{"dnsPort": t.DNSPort, "adminPort": t.AdminPort, "probePort": t.ProbePort} {
		if p <= 0 || p > 65535 {
			errs = append(errs, fmt.Errorf("%s %d out of range", name, p))
		}
	}
	if t.DNSPort == t.AdminPort || t.DNSPort == t.ProbePort || t.AdminPort == t.ProbePort {
		errs = append(errs, fmt.Errorf("dnsPort %d, adminPort %d and probePort %d must differ", t.DNSPort, t.AdminPort, t.ProbePort))
	}
	// The API server issues projected tokens for 10 minutes at least.
	if t.TokenExpirationSeconds < 600 {
		errs = append(errs, fmt.Errorf("tokenExpirationSeconds %d below 600", t.TokenExpirationSeconds))
	}
	if strings.TrimSpace(t.TokenAudience) == "" {
		errs = append(errs, errors.New("tokenAudience is empty"))
	}
	if t.StateDir == "" || t.StateDir[0] != '/' {
		errs = append(errs, fmt.Errorf("stateDir %q is not absolute", t.StateDir))
	}
	if err := t.validateAgentEnv(); err != nil {
		errs = append(errs, fmt.Errorf("agentEnv: %w", err))
	}
	return errors.Join(errs...)
}

// validateResources checks what the API server would reject after the
// patch (and so fail the pod, whatever the failurePolicy): negative
// quantities and requests above limits.
func validateResources(r corev1.ResourceRequirements) error {
	for name, q := range r.Requests {
		if q.Sign() < 0 {
			return fmt.Errorf("request %s %s is negative", name, q.String())
		}
		if l, ok := r.Limits[name]; ok && q.Cmp(l) > 0 {
			return fmt.Errorf("request %s %s is above the limit %s", name, q.String(), l.String())
		}
	}
	for name, q := range r.Limits {
		if q.Sign() < 0 {
			return fmt.Errorf("limit %s %s is negative", name, q.String())
		}
	}
	return nil
}

// parseTemplate reads a template file's content, layered on base. Unknown
// fields are errors, so a typo in a ConfigMap is reported instead of
// silently ignored.
func parseTemplate(data []byte, base Template) (Template, error) {
	var t Template
	if err := yaml.UnmarshalStrict(data, &t); err != nil {
		return Template{}, fmt.Errorf("parse template: %w", err)
	}
	t = t.over(base)
	if err := t.validate(); err != nil {
		return Template{}, fmt.Errorf("invalid template: %w", err)
	}
	return t, nil
}

// loadTemplate reads and parses the template file at path.
func loadTemplate(path string, base Template) (Template, []byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Template{}, nil, fmt.Errorf("read template: %w", err)
	}
	t, err := parseTemplate(data, base)
	return t, data, err
}

// ParseTemplate parses and validates the content of a template file as the
// webhook uses it: layered over DefaultTemplate. It is the check of
// `meshdns validate --inject-template` and of the control plane's start.
func ParseTemplate(data []byte) (Template, error) {
	return parseTemplate(data, DefaultTemplate())
}
