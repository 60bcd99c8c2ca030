package kubesource

import (
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/flowcontrol"
)

// Client opens the lists and watches the source runs its informers on.
// The source sets the label selector in the options it passes (and the
// informers set the resource version and timeouts); a Client passes them
// on unchanged. Tests build one from client-go's fake clientset.
type Client interface {
	// Services lists and watches core/v1 Services in namespace ("" for
	// every namespace).
	Services(namespace string) cache.ListerWatcher
	// EndpointSlices lists and watches discovery.k8s.io/v1 EndpointSlices
	// in namespace ("" for every namespace).
	EndpointSlices(namespace string) cache.ListerWatcher
}

// restClient is the production Client: one REST client per API group,
// decoding with a scheme that knows only the types the source reads.
//
// Not client-go's clientset: its scheme package registers every API group
// at package initialisation, which every process of the one meshdns binary
// (each pod's agent included) would pay for in binary size and RSS
// (internal/archtest keeps it out of cmd/meshdns).
type restClient struct {
	core      *rest.RESTClient // "/api", v1
	discovery *rest.RESTClient // "/apis", discovery.k8s.io/v1
}

var _ Client = (*restClient)(nil)

// NewClientForConfig returns a Client for the API server cfg reaches. It
// does no I/O. Like client-go's clientset, both API groups share one HTTP
// client, and one rate limiter when cfg sets QPS (else each group gets
// client-go's default).
func NewClientForConfig(cfg *rest.Config) (Client, error) {
	// The scheme is built here, not at package initialisation, so the
	// processes that never watch Kubernetes (agents) do not pay for it.
	scheme := runtime.NewScheme()
	metav1.AddToGroupVersion(scheme, schema.GroupVersion{Version: "v1"}) // list options, watch events, status
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, discoveryv1.AddToScheme} {
		if err := add(scheme); err != nil {
			return nil, fmt.Errorf("kubernetes client scheme: %w", err)
		}
	}
	codecs := serializer.NewCodecFactory(scheme).WithoutConversion()

	base := rest.CopyConfig(cfg)
	if base.UserAgent == "" {
		base.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	if base.RateLimiter == nil && base.QPS > 0 {
		if base.Burst <= 0 {
			return nil, errors.New("kubernetes client: burst must be positive when QPS is set")
		}
		base.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(base.QPS, base.Burst)
	}
	httpClient, err := rest.HTTPClientFor(base)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	group := func(apiPath string, gv schema.GroupVersion) (*rest.RESTClient, error) {
		c := rest.CopyConfig(base)
		c.APIPath = apiPath
		c.GroupVersion = &gv
		c.NegotiatedSerializer = codecs
		rc, err := rest.RESTClientForConfigAndClient(c, httpClient)
		if err != nil {
			return nil, fmt.Errorf("kubernetes client %s: %w", gv, err)
		}
		return rc, nil
	}
	core, err := group("/api", corev1.SchemeGroupVersion)
	if err != nil {
		return nil, err
	}
	disc, err := group("/apis", discoveryv1.SchemeGroupVersion)
	if err != nil {
		return nil, err
	}
	return &restClient{core: core, discovery: disc}, nil
}

func (c *restClient) Services(namespace string) cache.ListerWatcher {
	return cache.NewFilteredListWatchFromClient(c.core, "services", namespace, func(*metav1.ListOptions) {})
}

func (c *restClient) EndpointSlices(namespace string) cache.ListerWatcher {
	return cache.NewFilteredListWatchFromClient(c.discovery, "endpointslices", namespace, func(*metav1.ListOptions) {})
}
