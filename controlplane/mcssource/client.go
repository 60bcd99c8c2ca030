package mcssource

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// The MCS API's group and the labels its controllers put on the
// EndpointSlices of an imported service (KEP-1645).
const (
	Group                = "multicluster.x-k8s.io"
	Version              = "v1alpha1"
	Resource             = "serviceimports"
	LabelServiceName     = "multicluster.kubernetes.io/service-name"
	LabelSourceCluster   = "multicluster.kubernetes.io/source-cluster"
	serviceImportsPath   = "/apis/" + Group + "/" + Version
	endpointSliceGroup   = "discovery.k8s.io"
	endpointSliceVersion = "v1"
)

// Client is what the source needs of the API server. Tests may fake it.
type Client interface {
	// Present reports whether the API server serves ServiceImports
	// (multicluster.x-k8s.io/v1alpha1), that is whether its CRD is
	// installed and established.
	Present(ctx context.Context) (bool, error)
	// ServiceImports lists and watches ServiceImports in every namespace.
	ServiceImports() cache.ListerWatcher
	// EndpointSlices lists and watches the EndpointSlices matching
	// selector in every namespace.
	EndpointSlices(selector string) cache.ListerWatcher
}

// restClient is the production Client: a dynamic client (unstructured
// objects: the MCS API's Go types are not a dependency) and a REST client
// for discovery. Neither registers client-go's clientset scheme.
type restClient struct {
	dyn  dynamic.Interface
	disc *rest.RESTClient
}

var _ Client = (*restClient)(nil)

// NewClientForConfig returns a Client for the API server cfg reaches. It
// does no I/O.
func NewClientForConfig(cfg *rest.Config) (Client, error) {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("mcs client: %w", err)
	}
	scheme := runtime.NewScheme()
	metav1.AddToGroupVersion(scheme, schema.GroupVersion{Version: "v1"})
	c := rest.CopyConfig(cfg)
	c.APIPath = "/apis"
	c.GroupVersion = &schema.GroupVersion{Group: Group, Version: Version}
	c.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	disc, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("mcs discovery client: %w", err)
	}
	return &restClient{dyn: dyn, disc: disc}, nil
}

// Present asks the API server's discovery document of the group version:
// no RBAC is needed for it (system:discovery), unlike reading the CRD.
func (c *restClient) Present(ctx context.Context) (bool, error) {
	raw, err := c.disc.Get().AbsPath(serviceImportsPath).Do(ctx).Raw()
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("discover %s: %w", serviceImportsPath, err)
	}
	var list metav1.APIResourceList
	if err := json.Unmarshal(raw, &list); err != nil {
		return false, fmt.Errorf("discover %s: %w", serviceImportsPath, err)
	}
	return slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == Resource }), nil
}

func (c *restClient) ServiceImports() cache.ListerWatcher {
	return listWatch(c.dyn.Resource(schema.GroupVersionResource{Group: Group, Version: Version, Resource: Resource}), "")
}

func (c *restClient) EndpointSlices(selector string) cache.ListerWatcher {
	gvr := schema.GroupVersionResource{Group: endpointSliceGroup, Version: endpointSliceVersion, Resource: "endpointslices"}
	return listWatch(c.dyn.Resource(gvr), selector)
}

func listWatch(r dynamic.NamespaceableResourceInterface, selector string) cache.ListerWatcher {
	return &cache.ListWatch{
		ListFunc: func(o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = selector
			return r.List(context.Background(), o)
		},
		WatchFunc: func(o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = selector
			return r.Watch(context.Background(), o)
		},
	}
}
