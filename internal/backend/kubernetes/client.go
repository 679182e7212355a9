package kubernetes

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
)

// APIVerbs is every Kubernetes API verb this backend uses, by resource (all
// in the core group, in its namespace). It is the one list the RBAC Role
// in deployments/kubernetes/rbac.yaml must match; coreClient refuses any
// call not listed here, and a test checks the Role against it.
var APIVerbs = map[string][]string{
	"pods":     {"create", "delete", "get", "list", "watch"},
	"services": {"create", "delete", "get", "list"},
}

// coreScheme knows core/v1 only. client-go's typed clientset registers every
// API group at package init; this binary is also the sandbox server, which
// would pay that on every sandbox start. Built on first use, not at init.
var coreScheme = sync.OnceValues(func() (*runtime.Scheme, serializer.CodecFactory) {
	s := runtime.NewScheme()
	if err := corev1.AddToScheme(s); err != nil {
		panic(fmt.Sprintf("register core/v1: %v", err)) // static types: cannot fail
	}
	return s, serializer.NewCodecFactory(s)
})

// coreClient is the handful of Pod and Service calls the backend makes,
// over client-go's REST client, in one namespace.
type coreClient struct {
	rc     *rest.RESTClient
	ns     string
	params runtime.ParameterCodec
}

func newCoreClient(cfg *rest.Config, namespace string) (*coreClient, error) {
	s, codecs := coreScheme()
	cfg = rest.CopyConfig(cfg)
	cfg.APIPath = "/api"
	cfg.GroupVersion = &corev1.SchemeGroupVersion
	cfg.NegotiatedSerializer = codecs.WithoutConversion()
	if cfg.UserAgent == "" {
		cfg.UserAgent = "sandgate"
	}
	rc, err := rest.RESTClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return &coreClient{rc: rc, ns: namespace, params: runtime.NewParameterCodec(s)}, nil
}

var verbMethods = map[string]string{
	"create": http.MethodPost, "delete": http.MethodDelete,
	"get": http.MethodGet, "list": http.MethodGet, "watch": http.MethodGet,
}

// req starts a namespaced request for verb on resource, refusing verbs the
// RBAC list does not grant.
func (c *coreClient) req(verb, resource string) (*rest.Request, error) {
	if !slices.Contains(APIVerbs[resource], verb) {
		return nil, fmt.Errorf("kubernetes client: %s %s is not in APIVerbs (and so not in the RBAC Role)", verb, resource)
	}
	return c.rc.Verb(verbMethods[verb]).Namespace(c.ns).Resource(resource), nil
}

func (c *coreClient) get(ctx context.Context, resource, name string, into runtime.Object) error {
	r, err := c.req("get", resource)
	if err != nil {
		return err
	}
	return r.Name(name).Do(ctx).Into(into)
}

func (c *coreClient) create(ctx context.Context, resource string, obj, into runtime.Object) error {
	r, err := c.req("create", resource)
	if err != nil {
		return err
	}
	return r.Body(obj).Do(ctx).Into(into)
}

func (c *coreClient) delete(ctx context.Context, resource, name string, opts metav1.DeleteOptions) error {
	r, err := c.req("delete", resource)
	if err != nil {
		return err
	}
	return r.Name(name).Body(&opts).Do(ctx).Error()
}

func (c *coreClient) list(ctx context.Context, resource string, opts metav1.ListOptions, into runtime.Object) error {
	r, err := c.req("list", resource)
	if err != nil {
		return err
	}
	return r.VersionedParams(&opts, c.params).Do(ctx).Into(into)
}

func (c *coreClient) watch(ctx context.Context, resource string, opts metav1.ListOptions) (watch.Interface, error) {
	r, err := c.req("watch", resource)
	if err != nil {
		return nil, err
	}
	opts.Watch = true
	return r.VersionedParams(&opts, c.params).Watch(ctx)
}

func (c *coreClient) getPod(ctx context.Context, name string) (*corev1.Pod, error) {
	var pod corev1.Pod
	return &pod, c.get(ctx, "pods", name, &pod)
}

func (c *coreClient) getService(ctx context.Context, name string) (*corev1.Service, error) {
	var svc corev1.Service
	return &svc, c.get(ctx, "services", name, &svc)
}

func (c *coreClient) createPod(ctx context.Context, pod *corev1.Pod) (*corev1.Pod, error) {
	var out corev1.Pod
	return &out, c.create(ctx, "pods", pod, &out)
}

func (c *coreClient) createService(ctx context.Context, svc *corev1.Service) (*corev1.Service, error) {
	var out corev1.Service
	return &out, c.create(ctx, "services", svc, &out)
}
