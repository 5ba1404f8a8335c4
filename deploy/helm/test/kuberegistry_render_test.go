package charttest

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

// The rules configurator.kubernetesRegistry grants: list and watch on the
// kinds a Kubernetes registry reads, patch on the status of sluice's own,
// nothing more.
var (
	dasSchiffRule = rbacv1.PolicyRule{APIGroups: []string{"network.t-caas.telekom.com"},
		Resources: []string{"layer2networkconfigurations", "vrfrouteconfigurations"}, Verbs: []string{"list", "watch"}}
	sluiceKindsRules = []rbacv1.PolicyRule{
		{APIGroups: []string{"sluice.dev"}, Resources: []string{"layer2networks", "vrfroutes", "routingtables"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{"sluice.dev"}, Resources: []string{"layer2networks/status", "vrfroutes/status", "routingtables/status"}, Verbs: []string{"patch"}},
	}
)

func equalRules(a, b []rbacv1.PolicyRule) bool {
	return slices.EqualFunc(a, b, func(x, y rbacv1.PolicyRule) bool {
		return slices.Equal(x.APIGroups, y.APIGroups) && slices.Equal(x.Resources, y.Resources) && slices.Equal(x.Verbs, y.Verbs) &&
			len(x.ResourceNames) == 0 && len(y.ResourceNames) == 0 && len(x.NonResourceURLs) == 0 && len(y.NonResourceURLs) == 0
	})
}

// TestChart_ConfiguratorKubernetesRegistry: by default the configurator
// has no identity in the cluster (no token mounted); with
// configurator.kubernetesRegistry it runs as its own ServiceAccount with
// the token mounted, a ClusterRole granting das-schiff's kinds (and
// sluice's in every namespace, or a Role in each namespace named), and the
// other services still mount no token.
func TestChart_ConfiguratorKubernetesRegistry(t *testing.T) {
	tests := []struct {
		name       string
		valuesFile string
		enabled    bool
		namespaces []string
	}{
		{name: "defaults"},
		{name: "every namespace", valuesFile: "testdata/kube-registry.yaml", enabled: true},
		{name: "two namespaces", valuesFile: "testdata/kube-registry-namespaces.yaml", enabled: true, namespaces: []string{"net", "edge"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs, rel := render(t, tt.valuesFile)
			if got := strings.Contains(rel.Info.Notes, "Kubernetes registry: the configurator runs as ServiceAccount sl-configurator"); got != tt.enabled {
				t.Errorf("NOTES name the configurator's ServiceAccount: %v, want %v:\n%s", got, tt.enabled, rel.Info.Notes)
			}
			if tt.namespaces != nil && !strings.Contains(rel.Info.Notes, "--namespace net") {
				t.Errorf("NOTES without the registry's --namespace:\n%s", rel.Info.Notes)
			}
			spec := get[*appsv1.Deployment](t, objs, "Deployment/sl-configurator").Spec.Template.Spec
			for _, other := range []string{"rollout-coordinator", "reaper"} {
				os := get[*appsv1.Deployment](t, objs, "Deployment/sl-"+other).Spec.Template.Spec
				if os.AutomountServiceAccountToken == nil || *os.AutomountServiceAccountToken || os.ServiceAccountName != "" {
					t.Errorf("%s: automount %v, account %q: want no token (it never talks to the API server)", other, os.AutomountServiceAccountToken, os.ServiceAccountName)
				}
			}
			if !tt.enabled {
				if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken || spec.ServiceAccountName != "" {
					t.Errorf("configurator: automount %v, account %q: want no token by default", spec.AutomountServiceAccountToken, spec.ServiceAccountName)
				}
				for _, k := range []string{"ServiceAccount/sl-configurator", "ClusterRole/sl-configurator", "ClusterRoleBinding/sl-configurator"} {
					if _, ok := objs[k]; ok {
						t.Errorf("%s rendered by default", k)
					}
				}
				return
			}
			if spec.AutomountServiceAccountToken == nil || !*spec.AutomountServiceAccountToken || spec.ServiceAccountName != "sl-configurator" {
				t.Errorf("configurator: automount %v, account %q: want sl-configurator's token mounted", spec.AutomountServiceAccountToken, spec.ServiceAccountName)
			}
			sa := get[*corev1.ServiceAccount](t, objs, "ServiceAccount/sl-configurator")
			if sa.Namespace != namespace {
				t.Errorf("ServiceAccount in %q, want %q", sa.Namespace, namespace)
			}
			if tt.namespaces == nil && sa.Annotations["team"] != "network" {
				t.Errorf("ServiceAccount annotations %v, want team: network", sa.Annotations)
			}
			want := []rbacv1.PolicyRule{dasSchiffRule}
			if len(tt.namespaces) == 0 {
				want = append(want, sluiceKindsRules...)
			}
			if cr := get[*rbacv1.ClusterRole](t, objs, "ClusterRole/sl-configurator"); !equalRules(cr.Rules, want) {
				t.Errorf("ClusterRole rules %+v, want exactly %+v", cr.Rules, want)
			}
			subject := rbacv1.Subject{Kind: "ServiceAccount", Name: "sl-configurator", Namespace: namespace}
			crb := get[*rbacv1.ClusterRoleBinding](t, objs, "ClusterRoleBinding/sl-configurator")
			if crb.RoleRef.Kind != "ClusterRole" || crb.RoleRef.Name != "sl-configurator" || !slices.Equal(crb.Subjects, []rbacv1.Subject{subject}) {
				t.Errorf("ClusterRoleBinding %+v %+v, want sl-configurator to the chart's account", crb.RoleRef, crb.Subjects)
			}
			for _, ns := range tt.namespaces {
				r := get[*rbacv1.Role](t, objs, "Role/"+ns+"/sl-configurator")
				if !equalRules(r.Rules, sluiceKindsRules) {
					t.Errorf("Role in %s: rules %+v, want exactly %+v", ns, r.Rules, sluiceKindsRules)
				}
				rb := get[*rbacv1.RoleBinding](t, objs, "RoleBinding/"+ns+"/sl-configurator")
				if rb.RoleRef.Kind != "Role" || rb.RoleRef.Name != "sl-configurator" || !slices.Equal(rb.Subjects, []rbacv1.Subject{subject}) {
					t.Errorf("RoleBinding in %s: %+v %+v, want the Role to the chart's account", ns, rb.RoleRef, rb.Subjects)
				}
			}
		})
	}
}
