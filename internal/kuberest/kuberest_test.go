package kuberest

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
)

func TestFor(t *testing.T) {
	c, err := New(&rest.Config{Host: "https://127.0.0.1:1"}, corev1.AddToScheme, appsv1.AddToScheme)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		gv   schema.GroupVersion
		want string
	}{
		{name: "core group under /api", gv: corev1.SchemeGroupVersion, want: "/api/v1/namespaces/ns/pods"},
		{name: "named group under /apis", gv: appsv1.SchemeGroupVersion, want: "/apis/apps/v1/namespaces/ns/daemonsets"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc, err := c.For(tc.gv)
			if err != nil {
				t.Fatal(err)
			}
			resource := map[string]string{"": "pods", "apps": "daemonsets"}[tc.gv.Group]
			if got := rc.Get().Namespace("ns").Resource(resource).URL().Path; got != tc.want {
				t.Errorf("path = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestNewRejectsBadScheme(t *testing.T) {
	bad := func(*runtime.Scheme) error { return errTest }
	if _, err := New(&rest.Config{}, bad); err == nil {
		t.Fatal("New accepted a scheme that failed to register")
	}
}

var errTest = testError("register failed")

type testError string

func (e testError) Error() string { return string(e) }
