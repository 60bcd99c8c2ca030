//go:build !agentonly

package main

import (
	"context"
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
)

// kubeREST reads the few API groups that drain and analyze need through
// REST clients on a scheme of their types only: not client-go's
// clientset, which would register every API group in every process of the
// one binary (internal/archtest keeps it out).
type kubeREST struct {
	core, apps, discovery, admission *rest.RESTClient
	params                           runtime.ParameterCodec
}

func newKubeREST(cfg *rest.Config) (*kubeREST, error) {
	scheme := runtime.NewScheme()
	metav1.AddToGroupVersion(scheme, schema.GroupVersion{Version: "v1"})
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, appsv1.AddToScheme, discoveryv1.AddToScheme, admissionregistrationv1.AddToScheme} {
		if err := add(scheme); err != nil {
			return nil, fmt.Errorf("kube client scheme: %w", err)
		}
	}
	codecs := serializer.NewCodecFactory(scheme).WithoutConversion()
	client := func(apiPath string, gv schema.GroupVersion) (*rest.RESTClient, error) {
		c := rest.CopyConfig(cfg)
		c.APIPath, c.GroupVersion, c.NegotiatedSerializer = apiPath, &gv, codecs
		if c.UserAgent == "" {
			c.UserAgent = rest.DefaultKubernetesUserAgent()
		}
		return rest.RESTClientFor(c)
	}
	k := &kubeREST{params: runtime.NewParameterCodec(scheme)}
	var err error
	if k.core, err = client("/api", corev1.SchemeGroupVersion); err != nil {
		return nil, err
	}
	if k.apps, err = client("/apis", appsv1.SchemeGroupVersion); err != nil {
		return nil, err
	}
	if k.discovery, err = client("/apis", discoveryv1.SchemeGroupVersion); err != nil {
		return nil, err
	}
	if k.admission, err = client("/apis", admissionregistrationv1.SchemeGroupVersion); err != nil {
		return nil, err
	}
	return k, nil
}

// get reads one object (namespace "" for cluster-scoped ones) into out.
func (k *kubeREST) get(ctx context.Context, c *rest.RESTClient, namespace, resource, name string, out runtime.Object) error {
	return c.Get().NamespaceIfScoped(namespace, namespace != "").Resource(resource).Name(name).Do(ctx).Into(out)
}

// list lists resource in namespace ("" for all) into out.
func (k *kubeREST) list(ctx context.Context, c *rest.RESTClient, namespace, resource string, opts metav1.ListOptions, out runtime.Object) error {
	return c.Get().NamespaceIfScoped(namespace, namespace != "").Resource(resource).VersionedParams(&opts, k.params).Do(ctx).Into(out)
}
