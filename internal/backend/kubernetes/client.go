package kubernetes

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
)

// APIVerbs is every Kubernetes API verb this backend uses, by resource (in
// its namespace; the group is APIGroups'). It is the one list the RBAC Role
// in deployments/kubernetes/rbac.yaml must match; apiClient refuses any
// call not listed here, and a test checks the Role against it.
var APIVerbs = map[string][]string{
	"pods":            {"create", "delete", "get", "list", "patch", "watch"},
	"pods/log":        {"get"},
	"services":        {"create", "delete", "get", "list"},
	"networkpolicies": {"create", "delete", "get"},
	"secrets":         {"create", "delete", "get", "list", "patch"},
}

// APIGroups is the API group of each resource in APIVerbs ("" = core).
var APIGroups = map[string]string{
	"pods":            corev1.GroupName,
	"pods/log":        corev1.GroupName,
	"services":        corev1.GroupName,
	"networkpolicies": networkingv1.GroupName,
	"secrets":         corev1.GroupName,
}

// apiScheme knows core/v1 and networking.k8s.io/v1 only. client-go's typed
// clientset registers every API group at package init; this binary is also
// the sandbox server, which would pay that on every sandbox start. Built on
// first use, not at init.
var apiScheme = sync.OnceValues(func() (*runtime.Scheme, serializer.CodecFactory) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, networkingv1.AddToScheme} {
		if err := add(s); err != nil {
			panic(fmt.Sprintf("register API types: %v", err)) // static types: cannot fail
		}
	}
	return s, serializer.NewCodecFactory(s)
})

// apiClient is the handful of Pod, Service and NetworkPolicy calls the
// backend makes, over client-go's REST clients, in one namespace.
type apiClient struct {
	rc     map[string]*rest.RESTClient // by API group
	ns     string
	params runtime.ParameterCodec
}

func newAPIClient(cfg *rest.Config, namespace string) (*apiClient, error) {
	s, codecs := apiScheme()
	c := &apiClient{rc: map[string]*rest.RESTClient{}, ns: namespace, params: runtime.NewParameterCodec(s)}
	for group, gv := range map[string]struct {
		path string
		gv   *schema.GroupVersion
	}{
		corev1.GroupName:       {"/api", &corev1.SchemeGroupVersion},
		networkingv1.GroupName: {"/apis", &networkingv1.SchemeGroupVersion},
	} {
		gc := rest.CopyConfig(cfg)
		gc.APIPath, gc.GroupVersion = gv.path, gv.gv
		gc.NegotiatedSerializer = codecs.WithoutConversion()
		if gc.UserAgent == "" {
			gc.UserAgent = "sandgate"
		}
		rc, err := rest.RESTClientFor(gc)
		if err != nil {
			return nil, fmt.Errorf("kubernetes client: %w", err)
		}
		c.rc[group] = rc
	}
	return c, nil
}

var verbMethods = map[string]string{
	"create": http.MethodPost, "delete": http.MethodDelete,
	"get": http.MethodGet, "list": http.MethodGet, "watch": http.MethodGet, "patch": http.MethodPatch,
}

// req starts a namespaced request for verb on resource, refusing verbs the
// RBAC list does not grant.
func (c *apiClient) req(verb, resource string) (*rest.Request, error) {
	if !slices.Contains(APIVerbs[resource], verb) {
		return nil, fmt.Errorf("kubernetes client: %s %s is not in APIVerbs (and so not in the RBAC Role)", verb, resource)
	}
	return c.rc[APIGroups[resource]].Verb(verbMethods[verb]).Namespace(c.ns).Resource(resource), nil
}

func (c *apiClient) get(ctx context.Context, resource, name string, into runtime.Object) error {
	r, err := c.req("get", resource)
	if err != nil {
		return err
	}
	return r.Name(name).Do(ctx).Into(into)
}

func (c *apiClient) create(ctx context.Context, resource string, obj, into runtime.Object) error {
	r, err := c.req("create", resource)
	if err != nil {
		return err
	}
	return r.Body(obj).Do(ctx).Into(into)
}

func (c *apiClient) delete(ctx context.Context, resource, name string, opts metav1.DeleteOptions) error {
	r, err := c.req("delete", resource)
	if err != nil {
		return err
	}
	return r.Name(name).Body(&opts).Do(ctx).Error()
}

// patch patches resource/name, reading the result into into (nil: not read).
func (c *apiClient) patch(ctx context.Context, resource, name string, pt types.PatchType, body []byte, into runtime.Object) error {
	r, err := c.req("patch", resource)
	if err != nil {
		return err
	}
	res := r.Name(name).SetHeader("Content-Type", string(pt)).Body(body).Do(ctx)
	if into == nil {
		return res.Error()
	}
	return res.Into(into)
}

func (c *apiClient) list(ctx context.Context, resource string, opts metav1.ListOptions, into runtime.Object) error {
	r, err := c.req("list", resource)
	if err != nil {
		return err
	}
	return r.VersionedParams(&opts, c.params).Do(ctx).Into(into)
}

func (c *apiClient) watch(ctx context.Context, resource string, opts metav1.ListOptions) (watch.Interface, error) {
	r, err := c.req("watch", resource)
	if err != nil {
		return nil, err
	}
	opts.Watch = true
	return r.VersionedParams(&opts, c.params).Watch(ctx)
}

// logs streams a Pod's container log (the pods/log subresource).
func (c *apiClient) logs(ctx context.Context, name string, opts *corev1.PodLogOptions) (io.ReadCloser, error) {
	if !slices.Contains(APIVerbs["pods/log"], "get") {
		return nil, fmt.Errorf("kubernetes client: get pods/log is not in APIVerbs (and so not in the RBAC Role)")
	}
	return c.rc[corev1.GroupName].Get().Namespace(c.ns).Resource("pods").Name(name).SubResource("log").
		VersionedParams(opts, c.params).Stream(ctx)
}

func (c *apiClient) getPod(ctx context.Context, name string) (*corev1.Pod, error) {
	var pod corev1.Pod
	return &pod, c.get(ctx, "pods", name, &pod)
}

func (c *apiClient) getService(ctx context.Context, name string) (*corev1.Service, error) {
	var svc corev1.Service
	return &svc, c.get(ctx, "services", name, &svc)
}

func (c *apiClient) createPod(ctx context.Context, pod *corev1.Pod) (*corev1.Pod, error) {
	var out corev1.Pod
	return &out, c.create(ctx, "pods", pod, &out)
}
