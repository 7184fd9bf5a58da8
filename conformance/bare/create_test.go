package bare

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	schedulingv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	"github.com/gpulab/gpulab/internal/gang/gangtest"
)

func scheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := schedulingv1beta1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

// recording is a fake client that logs each create's kind in order and
// fails those fail names.
func recording(t *testing.T, fail map[string]bool) (client.Client, func() []string) {
	var mu sync.Mutex
	var order []string
	c := fake.NewClientBuilder().WithScheme(scheme(t)).WithInterceptorFuncs(interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			mu.Lock()
			order = append(order, kindName(obj))
			mu.Unlock()
			if fail[kindName(obj)] {
				return errors.New("refused")
			}
			return c.Create(ctx, obj, opts...)
		},
	}).Build()
	return c, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), order...)
	}
}

func kindName(obj client.Object) string {
	switch obj.(type) {
	case *schedulingv1beta1.PodGroup:
		return "PodGroup/" + obj.GetName()
	case *corev1.Service:
		return "Service/" + obj.GetName()
	case *resourceapi.ResourceClaimTemplate:
		return "ResourceClaimTemplate/" + obj.GetName()
	}
	return "Pod/" + obj.GetName()
}

// The operator's order: the head Service, the PodGroup, then the pods.
func TestCreateInTheOperatorsOrder(t *testing.T) {
	c, order := recording(t, nil)
	if err := CreateAll(context.Background(), c, []*corev1.ConfigMap{created(t)}); err != nil {
		t.Fatal(err)
	}
	got := order()
	if len(got) != 6 || got[0] != "Service/g-head" || got[1] != "PodGroup/g-pg" {
		t.Fatalf("creates %v, want the Service, the PodGroup, then 4 pods", got)
	}
	var pods corev1.PodList
	if err := c.List(context.Background(), &pods); err != nil || len(pods.Items) != 4 {
		t.Errorf("%d pods (%v), want 4", len(pods.Items), err)
	}
}

// A DRA group's claim template comes before the PodGroup and the pods that
// claim from it, as in the operator; one that cannot be created leaves the
// gang without PodGroup and pods.
func TestCreateClaimTemplatesFirst(t *testing.T) {
	c := gangtest.Cluster()
	cm := Object(c.Name, nil, specOf(c, gangtest.Overheads()))
	cm.Namespace, cm.UID = c.Namespace, "uid-train"
	fc, order := recording(t, nil)
	if err := CreateAll(context.Background(), fc, []*corev1.ConfigMap{cm}); err != nil {
		t.Fatal(err)
	}
	got := order()
	if len(got) != 9 || got[0] != "Service/train-head" || got[1] != "ResourceClaimTemplate/train-extra-gpus" || got[2] != "PodGroup/train-pg" {
		t.Fatalf("creates %v, want the Service, the claim template, the PodGroup, then 6 pods", got)
	}
	fc, order = recording(t, map[string]bool{"ResourceClaimTemplate/train-extra-gpus": true})
	if err := CreateAll(context.Background(), fc, []*corev1.ConfigMap{cm}); err == nil || !strings.Contains(err.Error(), "train-extra-gpus") {
		t.Errorf("a refused claim template: %v", err)
	}
	if got := order(); len(got) != 2 {
		t.Errorf("creates %v after the claim template was refused", got)
	}
}

// A PodGroup that cannot be created leaves the gang without pods; pod
// failures are all reported.
func TestCreateStopsWithoutPodGroup(t *testing.T) {
	c, order := recording(t, map[string]bool{"PodGroup/g-pg": true})
	if err := CreateAll(context.Background(), c, []*corev1.ConfigMap{created(t)}); err == nil {
		t.Fatal("no error for a refused PodGroup")
	}
	if got := order(); len(got) != 2 {
		t.Errorf("creates %v after the PodGroup was refused", got)
	}
	c, _ = recording(t, map[string]bool{"Pod/g-workers-0": true, "Pod/g-workers-1": true})
	err := CreateAll(context.Background(), c, []*corev1.ConfigMap{created(t)})
	if err == nil || !strings.Contains(err.Error(), "g-workers-0") || !strings.Contains(err.Error(), "g-workers-1") {
		t.Errorf("error %v, want both failures", err)
	}
}

func TestResourceOf(t *testing.T) {
	for path, want := range map[string]string{
		"/api/v1/namespaces/ns/pods":                                  "api/v1/pods",
		"/api/v1/namespaces/ns/pods/p-0":                              "api/v1/pods",
		"/api/v1/namespaces/ns/services":                              "api/v1/services",
		"/apis/scheduling.volcano.sh/v1beta1/namespaces/ns/podgroups": "apis/scheduling.volcano.sh/v1beta1/podgroups",
		"/api/v1/namespaces/ns":                                       "api/v1/namespaces",
		"/api/v1/nodes":                                               "api/v1/nodes",
		"/apis/scheduling.volcano.sh/v1beta1":                         "apis/scheduling.volcano.sh/v1beta1",
		"/api":                                                        "api",
	} {
		if got := resourceOf(path); got != want {
			t.Errorf("resourceOf(%q) = %q, want %q", path, got, want)
		}
	}
}

// One bucket per resource, as client-go has one limiter per kind's REST
// client: pods of two namespaces share one, PodGroups have their own.
func TestLimitedPerResource(t *testing.T) {
	l := &limited{next: roundTripper(func(*http.Request) (*http.Response, error) { return &http.Response{StatusCode: 200}, nil }),
		qps: 1000, burst: 10, buckets: map[string]flowcontrol.RateLimiter{}}
	for _, p := range []string{"/api/v1/namespaces/a/pods", "/api/v1/namespaces/b/pods", "/apis/scheduling.volcano.sh/v1beta1/namespaces/a/podgroups"} {
		req := &http.Request{URL: &url.URL{Path: p}}
		req = req.WithContext(context.Background())
		resp, err := l.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Body != nil {
			_ = resp.Body.Close()
		}
	}
	if len(l.buckets) != 2 {
		t.Errorf("buckets %v, want pods and podgroups", l.buckets)
	}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestClientNeedsLimits(t *testing.T) {
	for _, in := range []ClientInput{
		{Config: &rest.Config{Host: "https://127.0.0.1:1"}, Scheme: scheme(t), Burst: 400},
		{Config: &rest.Config{Host: "https://127.0.0.1:1"}, Scheme: scheme(t), QPS: 200},
		{Scheme: scheme(t), QPS: 200, Burst: 400},
	} {
		if _, err := Client(in); err == nil {
			t.Errorf("%+v: no error", in)
		}
	}
}
