package auth

import (
	"context"
	"fmt"

	authv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
)

// reviewQPS is the rate of token reviews a control plane asks for at most.
const reviewQPS = 100

// NewReviewer returns a Reviewer creating authentication.k8s.io/v1
// TokenReviews through a REST client whose scheme knows only that group:
// not client-go's clientset, which registers every API group in every
// process of the one meshdns binary. It does no I/O. The control plane's
// service account needs `create` on tokenreviews, nothing else.
func NewReviewer(cfg *rest.Config) (Reviewer, error) {
	scheme := runtime.NewScheme()
	metav1.AddToGroupVersion(scheme, schema.GroupVersion{Version: "v1"})
	if err := authv1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("tokenreview client scheme: %w", err)
	}
	c := rest.CopyConfig(cfg)
	c.APIPath, c.GroupVersion = "/apis", &authv1.SchemeGroupVersion
	// Reviews get a rate limiter of their own, not client-go's default of
	// 5 a second (100 agents reconnecting after a restart waited 20s for
	// it) nor one shared with the watches: what protects the API server is
	// TokenReviewConfig.MaxInFlight, and this only caps the rate.
	c.RateLimiter, c.QPS, c.Burst = nil, reviewQPS, 2*reviewQPS
	c.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	rc, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("tokenreview client: %w", err)
	}
	return restReviewer{rc}, nil
}

type restReviewer struct{ rc *rest.RESTClient }

func (r restReviewer) Review(ctx context.Context, token string, audiences []string) (*authv1.TokenReviewStatus, error) {
	in := &authv1.TokenReview{Spec: authv1.TokenReviewSpec{Token: token, Audiences: audiences}}
	out := &authv1.TokenReview{}
	if err := r.rc.Post().Resource("tokenreviews").Body(in).Do(ctx).Into(out); err != nil {
		return nil, err
	}
	return &out.Status, nil
}
