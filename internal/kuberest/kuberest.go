// Package kuberest builds REST clients whose scheme knows only the API
// types their caller registers. It is the one way the control plane's
// roles talk to the API server without client-go's clientset, which would
// register every API group in every process of the one meshdns binary
// (internal/archtest keeps the clientset out).
package kuberest

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
)

// Clients makes REST clients for the groups of one scheme.
type Clients struct {
	cfg    *rest.Config
	codecs serializer.CodecFactory
	// Params encodes list and get options (VersionedParams) for this scheme.
	Params runtime.ParameterCodec
}

// New returns the clients of cfg for a scheme holding the types that add
// registers (corev1.AddToScheme, ...), plus the meta/v1 options.
func New(cfg *rest.Config, add ...func(*runtime.Scheme) error) (*Clients, error) {
	scheme := runtime.NewScheme()
	metav1.AddToGroupVersion(scheme, schema.GroupVersion{Version: "v1"})
	for _, a := range add {
		if err := a(scheme); err != nil {
			return nil, fmt.Errorf("kubernetes client scheme: %w", err)
		}
	}
	return &Clients{cfg: cfg, codecs: serializer.NewCodecFactory(scheme), Params: runtime.NewParameterCodec(scheme)}, nil
}

// For returns a client of group version gv: under /api for the core group,
// /apis for the others. It sets the default user agent when cfg has none.
func (c *Clients) For(gv schema.GroupVersion) (*rest.RESTClient, error) {
	rc := rest.CopyConfig(c.cfg)
	rc.APIPath = "/apis"
	if gv.Group == "" {
		rc.APIPath = "/api"
	}
	rc.GroupVersion, rc.NegotiatedSerializer = &gv, c.codecs.WithoutConversion()
	if rc.UserAgent == "" {
		rc.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	return rest.RESTClientFor(rc)
}
