package kubernetes

import (
	"maps"
	"path/filepath"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/sandgate/sandgate/internal/testutil"
)

var rbacManifest = filepath.Join(testutil.ModuleRoot(), "deployments", "kubernetes", "rbac.yaml")

// TestRBACMatchesAPIVerbs keeps deployments/kubernetes/rbac.yaml equal to
// APIVerbs, in both directions: no verb the code needs is missing, and the
// Role grants nothing the code does not use. (The integration tests run
// the backend under this very Role.)
func TestRBACMatchesAPIVerbs(t *testing.T) {
	t.Parallel()
	objs, err := testutil.DecodeManifest(rbacManifest)
	if err != nil {
		t.Fatal(err)
	}
	var role *rbacv1.Role
	var binding *rbacv1.RoleBinding
	var sa *corev1.ServiceAccount
	for _, o := range objs {
		switch o := o.(type) {
		case *rbacv1.Role:
			role = o
		case *rbacv1.RoleBinding:
			binding = o
		case *corev1.ServiceAccount:
			sa = o
		}
	}
	if role == nil || binding == nil || sa == nil {
		t.Fatalf("manifest needs a ServiceAccount, Role and RoleBinding; got %T", objs)
	}
	granted := map[string][]string{}
	for _, r := range role.Rules {
		if len(r.APIGroups) != 1 || len(r.ResourceNames) > 0 || len(r.NonResourceURLs) > 0 {
			t.Errorf("rule %+v: want resources of one API group", r)
		}
		for _, res := range r.Resources {
			if g, ok := APIGroups[res]; !ok || !slices.Equal(r.APIGroups, []string{g}) {
				t.Errorf("rule %+v grants %s in groups %v; the code uses it in group %q", r, res, r.APIGroups, g)
			}
			granted[res] = append(granted[res], r.Verbs...)
		}
	}
	for res := range granted {
		slices.Sort(granted[res])
	}
	want := map[string][]string{}
	for res, verbs := range APIVerbs {
		want[res] = slices.Sorted(slices.Values(verbs))
		if _, ok := APIGroups[res]; !ok {
			t.Errorf("APIVerbs has %s, APIGroups does not say its group", res)
		}
	}
	if !maps.EqualFunc(granted, want, slices.Equal[[]string]) {
		t.Errorf("Role grants %v, the code uses APIVerbs %v", granted, want)
	}
	if binding.RoleRef.Kind != "Role" || binding.RoleRef.Name != role.Name ||
		len(binding.Subjects) != 1 || binding.Subjects[0].Kind != "ServiceAccount" || binding.Subjects[0].Name != sa.Name {
		t.Errorf("binding %+v does not bind Role %s to ServiceAccount %s", binding, role.Name, sa.Name)
	}
}

func TestClientRefusesUnlistedVerbs(t *testing.T) {
	t.Parallel()
	c := &apiClient{}
	for _, call := range [][2]string{{"update", "pods"}, {"patch", "services"}, {"update", "services"}, {"update", "secrets"}, {"watch", "secrets"}, {"watch", "services"}, {"list", "networkpolicies"}, {"update", "networkpolicies"}} {
		if _, err := c.req(call[0], call[1]); err == nil {
			t.Errorf("req(%s %s) allowed; it is not in APIVerbs", call[0], call[1])
		}
	}
}
