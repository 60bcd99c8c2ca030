package selfcert

import (
	"context"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"

	"github.com/meshdns/meshdns/internal/kuberest"
)

// API is the part of the Kubernetes API the manager uses.
type API interface {
	GetSecret(ctx context.Context, namespace, name string) (*corev1.Secret, error)
	CreateSecret(ctx context.Context, s *corev1.Secret) (*corev1.Secret, error)
	UpdateSecret(ctx context.Context, s *corev1.Secret) (*corev1.Secret, error)
	GetWebhookConfig(ctx context.Context, name string) (*admissionv1.MutatingWebhookConfiguration, error)
	UpdateWebhookConfig(ctx context.Context, c *admissionv1.MutatingWebhookConfiguration) (*admissionv1.MutatingWebhookConfiguration, error)
}

// restAPI is API over two REST clients whose scheme knows only Secrets and
// webhook configurations (internal/kuberest).
type restAPI struct {
	core, admission *rest.RESTClient
}

// NewAPI returns the API for a REST configuration.
func NewAPI(cfg *rest.Config) (API, error) {
	c, err := kuberest.New(cfg, corev1.AddToScheme, admissionv1.AddToScheme)
	if err != nil {
		return nil, err
	}
	core, err := c.For(corev1.SchemeGroupVersion)
	if err != nil {
		return nil, err
	}
	adm, err := c.For(admissionv1.SchemeGroupVersion)
	if err != nil {
		return nil, err
	}
	return &restAPI{core: core, admission: adm}, nil
}

func (a *restAPI) GetSecret(ctx context.Context, namespace, name string) (*corev1.Secret, error) {
	out := &corev1.Secret{}
	return out, a.core.Get().Namespace(namespace).Resource("secrets").Name(name).Do(ctx).Into(out)
}

func (a *restAPI) CreateSecret(ctx context.Context, s *corev1.Secret) (*corev1.Secret, error) {
	out := &corev1.Secret{}
	return out, a.core.Post().Namespace(s.Namespace).Resource("secrets").Body(s).Do(ctx).Into(out)
}

func (a *restAPI) UpdateSecret(ctx context.Context, s *corev1.Secret) (*corev1.Secret, error) {
	out := &corev1.Secret{}
	return out, a.core.Put().Namespace(s.Namespace).Resource("secrets").Name(s.Name).Body(s).Do(ctx).Into(out)
}

func (a *restAPI) GetWebhookConfig(ctx context.Context, name string) (*admissionv1.MutatingWebhookConfiguration, error) {
	out := &admissionv1.MutatingWebhookConfiguration{}
	return out, a.admission.Get().Resource("mutatingwebhookconfigurations").Name(name).Do(ctx).Into(out)
}

func (a *restAPI) UpdateWebhookConfig(ctx context.Context, c *admissionv1.MutatingWebhookConfiguration) (*admissionv1.MutatingWebhookConfiguration, error) {
	out := &admissionv1.MutatingWebhookConfiguration{}
	return out, a.admission.Put().Resource("mutatingwebhookconfigurations").Name(c.Name).Body(c).Do(ctx).Into(out)
}
