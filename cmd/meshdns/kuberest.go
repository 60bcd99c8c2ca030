package main

import (
	"context"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"github.com/meshdns/meshdns/internal/kuberest"
)

// kubeREST reads the few API groups that drain and analyze need through
// REST clients on a scheme of their types only (internal/kuberest).
type kubeREST struct {
	core, apps, discovery, admission *rest.RESTClient
	params                           runtime.ParameterCodec
}

func newKubeREST(cfg *rest.Config) (*kubeREST, error) {
	c, err := kuberest.New(cfg, corev1.AddToScheme, appsv1.AddToScheme, discoveryv1.AddToScheme, admissionregistrationv1.AddToScheme)
	if err != nil {
		return nil, err
	}
	k := &kubeREST{params: c.Params}
	for _, g := range []struct {
		client **rest.RESTClient
		gv     schema.GroupVersion
	}{
		{&k.core, corev1.SchemeGroupVersion},
		{&k.apps, appsv1.SchemeGroupVersion},
		{&k.discovery, discoveryv1.SchemeGroupVersion},
		{&k.admission, admissionregistrationv1.SchemeGroupVersion},
	} {
		if *g.client, err = c.For(g.gv); err != nil {
			return nil, err
		}
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
