//go:build kube

package charttest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/types/known/durationpb"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	kyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"

	"github.com/sluicehq/sluice/deploy/helm/test/kube"
	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/registry"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/configurator"
)

// runConfigurator runs a configurator on env until the test ends.
// deleteAfter nil: the default settle period.
func runConfigurator(t *testing.T, env *natstest.Env, deleteAfter *time.Duration) {
	t.Helper()
	svc, err := configurator.New(configurator.Config{Conn: env.Connect(t), Settings: env.Settings, DeleteAfter: deleteAfter,
		Log: zerolog.New(zerolog.NewTestWriter(t))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// addKubeRegistry stores the spec of a Kubernetes registry synced every
// second.
func addKubeRegistry(t *testing.T, env *natstest.Env, name string, k *sluicev1.KubernetesRegistry) {
	t.Helper()
	spec := &sluicev1.RegistrySpec{Name: name, SyncInterval: durationpb.New(time.Second), Source: &sluicev1.RegistrySpec_Kubernetes{Kubernetes: k}}
	if _, err := store.New(env.Buckets.Control, func() *sluicev1.RegistrySpec { return &sluicev1.RegistrySpec{} }).
		Create(context.Background(), contract.RegistryKey(name), spec); err != nil {
		t.Fatal(err)
	}
}

// createYAML creates the object of one YAML document of resource gvr in ns
// ("" for a cluster-scoped kind).
func createYAML(t *testing.T, dyn dynamic.Interface, gvr schema.GroupVersionResource, ns, doc string) {
	t.Helper()
	obj := &unstructured.Unstructured{}
	if err := yamlDecode(doc, &obj.Object); err != nil {
		t.Fatal(err)
	}
	var ri dynamic.ResourceInterface = dyn.Resource(gvr)
	if ns != "" {
		ri = dyn.Resource(gvr).Namespace(ns)
	}
	if _, err := ri.Create(context.Background(), obj, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create: %v\n%s", err, doc)
	}
}

// yamlDecode decodes one YAML document into v.
func yamlDecode(doc string, v any) error {
	return kyaml.NewYAMLOrJSONDecoder(strings.NewReader(doc), 4096).Decode(v)
}

// TestKube_Registry_WithTheChartsRBAC: the chart installed with
// configurator.kubernetesRegistry, two registries authenticated as its
// configurator ServiceAccount (a TokenRequest token, as the pod's projected
// one): das-schiff's kinds and sluice's own sync, every watch is up and
// sluice's resources get their status; the account may not get a resource,
// change a spec, delete one, patch das-schiff's, or read Secrets. With
// namespaces, sluice's kinds are granted in those namespaces only.
func TestKube_Registry_WithTheChartsRBAC(t *testing.T) {
	for _, tc := range []struct {
		name              string
		namespaces        []any  // configurator.kubernetesRegistry.namespaces
		registryNamespace string // the sluice kinds' registry's --namespace
	}{
		{name: "every namespace"},
		{name: "namespace net", namespaces: []any{"net"}, registryNamespace: "net"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := kube.Start(t)
			dyn := dynamicClient(t, c)
			installDasSchiffCRDs(t, dyn)
			chrt, err := loader.Load(chartDir)
			if err != nil {
				t.Fatal(err)
			}
			admin, bg := c.Client(t), context.Background()
			if _, err := admin.CoreV1().Namespaces().Create(bg, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "net"}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			inst := action.NewInstall(helmConfig(t, c))
			inst.ReleaseName, inst.Namespace, inst.CreateNamespace = releaseName, namespace, true
			if _, err := inst.Run(chrt, map[string]any{"configurator": map[string]any{"kubernetesRegistry": map[string]any{"enabled": true, "namespaces": tc.namespaces}}}); err != nil {
				t.Fatalf("helm install: %v", err)
			}
			l2 := schema.GroupVersionResource{Group: registry.SluiceGroup, Version: "v1alpha1", Resource: "layer2networks"}
			natstest.Eventually(t, 30*time.Second, "the chart's CRDs to be served", func() bool {
				_, err := dyn.Resource(l2).List(context.Background(), metav1.ListOptions{})
				return err == nil
			})
			createYAML(t, dyn, l2, "net", "apiVersion: sluice.dev/v1alpha1\nkind: Layer2Network\nmetadata: {name: tenant-a}\nspec: {vlan: 100, vni: 10100}\n")
			createYAML(t, dyn, layer2GVR, "", "apiVersion: network.t-caas.telekom.com/v1alpha1\nkind: Layer2NetworkConfiguration\nmetadata: {name: tenant-b}\nspec: {id: 200, mtu: 1500, vni: 10200}\n")

			const sa = releaseName + "-configurator"
			exp := int64(3600)
			tr, err := admin.CoreV1().ServiceAccounts(namespace).CreateToken(bg, sa, &authenticationv1.TokenRequest{
				Spec: authenticationv1.TokenRequestSpec{Audiences: []string{"https://kubernetes.default.svc"}, ExpirationSeconds: &exp}}, metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("token of the chart's configurator account %s: %v", sa, err)
			}
			kubeconfig := c.Kubeconfig(t, tr.Status.Token)

			env := natstest.Start(t, contract.DefaultSettings())
			runConfigurator(t, env, nil)
			addKubeRegistry(t, env, "crs", &sluicev1.KubernetesRegistry{Kubeconfig: kubeconfig, Kinds: registry.KubeKinds()[2:], Namespace: tc.registryNamespace})
			addKubeRegistry(t, env, "das-schiff", &sluicev1.KubernetesRegistry{Kubeconfig: kubeconfig})

			natstest.Eventually(t, 30*time.Second, "both registries synced, every watch up, tenant-a's status written", func() bool {
				for _, name := range []string{"crs", "das-schiff"} {
					if st := kubeRegistryStatus(t, env, name); st.GetState() != sluicev1.RegistryState_REGISTRY_STATE_SYNCED || st.GetNote() != "" {
						return false
					}
				}
				obj, err := dyn.Resource(l2).Namespace("net").Get(bg, "tenant-a", metav1.GetOptions{})
				if err != nil {
					return false
				}
				rev, _, _ := unstructured.NestedString(obj.Object, "status", "revision")
				return rev != "" && storedIntent(t, env, "layer2network.tenant-a").GetSource() == "crs" &&
					storedIntent(t, env, "layer2network.tenant-b").GetSource() == "das-schiff"
			})
			// A watch refused is noted a moment after the sync: still no note after
			// two more syncs.
			since := kubeRegistryStatus(t, env, "crs").GetLastSync().AsTime()
			natstest.Eventually(t, 30*time.Second, "two more syncs", func() bool {
				return kubeRegistryStatus(t, env, "crs").GetLastSync().AsTime().Sub(since) >= 2*time.Second &&
					kubeRegistryStatus(t, env, "das-schiff").GetLastSync().AsTime().Sub(since) >= 2*time.Second
			})
			for _, name := range []string{"crs", "das-schiff"} {
				if st := kubeRegistryStatus(t, env, name); st.GetState() != sluicev1.RegistryState_REGISTRY_STATE_SYNCED || st.GetNote() != "" {
					t.Errorf("registry %s: %s, note %q, error %q", name, st.GetState(), st.GetNote(), st.GetError())
				}
			}

			// Exactly the rules the registry needs, as the server's authorizer
			// answers for the account: every kind it reads, listed and watched,
			// every status of sluice's kinds patched; nothing else on them.
			user := "system:serviceaccount:" + namespace + ":" + sa
			everywhere := len(tc.namespaces) == 0
			checks := []struct {
				verb, group, resource, sub string
				allowed                    bool
			}{
				{"list", registry.DasSchiffGroup, "layer2networkconfigurations", "", true},
				{"watch", registry.DasSchiffGroup, "layer2networkconfigurations", "", true},
				{"list", registry.DasSchiffGroup, "vrfrouteconfigurations", "", true},
				{"watch", registry.DasSchiffGroup, "vrfrouteconfigurations", "", true},
				{"list", registry.SluiceGroup, "layer2networks", "", true},
				{"watch", registry.SluiceGroup, "layer2networks", "", true},
				{"list", registry.SluiceGroup, "vrfroutes", "", true},
				{"watch", registry.SluiceGroup, "vrfroutes", "", true},
				{"list", registry.SluiceGroup, "routingtables", "", true},
				{"watch", registry.SluiceGroup, "routingtables", "", true},
				{"patch", registry.SluiceGroup, "layer2networks", "status", true},
				{"patch", registry.SluiceGroup, "vrfroutes", "status", true},
				{"patch", registry.SluiceGroup, "routingtables", "status", true},
				{"update", registry.SluiceGroup, "layer2networks", "status", false},
				{"get", registry.SluiceGroup, "routingtables", "", false},
				{"patch", registry.SluiceGroup, "vrfroutes", "", false},
				{"delete", registry.SluiceGroup, "routingtables", "", false},
				{"patch", registry.DasSchiffGroup, "vrfrouteconfigurations", "status", false},
				{"create", registry.DasSchiffGroup, "layer2networkconfigurations", "", false},
				{"get", "", "secrets", "", false},
				{"list", "", "configmaps", "", false},
				// sluice's kinds in another namespace, or in all at once: only
				// without namespaces.
				{"list", registry.SluiceGroup, "layer2networks", "", everywhere},
				{"watch", registry.SluiceGroup, "routingtables", "", everywhere},
				{"patch", registry.SluiceGroup, "vrfroutes", "status", everywhere},
			}
			last := len(checks)
			for i, a := range checks {
				ns := "net"
				if a.group == registry.DasSchiffGroup {
					ns = ""
				}
				switch i {
				case last - 3: // every namespace at once
					ns = ""
				case last - 2, last - 1:
					ns = "other"
				}
				r, err := admin.AuthorizationV1().SubjectAccessReviews().Create(bg, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
					User: user, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
					ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: a.verb, Group: a.group, Resource: a.resource, Subresource: a.sub}}}, metav1.CreateOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if r.Status.Allowed != a.allowed {
					t.Errorf("%s %s.%s/%s in %q: allowed %v, want %v", a.verb, a.resource, a.group, a.sub, ns, r.Status.Allowed, a.allowed)
				}
			}

			// What the account may not do.
			asConfigurator, err := dynamic.NewForConfig(c.Config(tr.Status.Token))
			if err != nil {
				t.Fatal(err)
			}
			core, err := kubernetes.NewForConfig(c.Config(tr.Status.Token))
			if err != nil {
				t.Fatal(err)
			}
			obj, err := dyn.Resource(l2).Namespace("net").Get(bg, "tenant-a", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			_ = unstructured.SetNestedField(obj.Object, int64(101), "spec", "vlan")
			for _, f := range []struct {
				what string
				err  func() error
			}{
				{"get a Layer2Network", func() error {
					_, err := asConfigurator.Resource(l2).Namespace("net").Get(bg, "tenant-a", metav1.GetOptions{})
					return err
				}},
				{"update a Layer2Network's spec", func() error {
					_, err := asConfigurator.Resource(l2).Namespace("net").Update(bg, obj, metav1.UpdateOptions{})
					return err
				}},
				{"patch a Layer2Network's spec", func() error {
					_, err := asConfigurator.Resource(l2).Namespace("net").Patch(bg, "tenant-a", types.MergePatchType, []byte(`{"spec":{"vlan":102}}`), metav1.PatchOptions{})
					return err
				}},
				{"delete a Layer2Network", func() error {
					return asConfigurator.Resource(l2).Namespace("net").Delete(bg, "tenant-a", metav1.DeleteOptions{})
				}},
				{"create a Layer2Network", func() error {
					o := &unstructured.Unstructured{}
					_ = yamlDecode("apiVersion: sluice.dev/v1alpha1\nkind: Layer2Network\nmetadata: {name: planted, namespace: net}\nspec: {vlan: 300, vni: 10300}\n", &o.Object)
					_, err := asConfigurator.Resource(l2).Namespace("net").Create(bg, o, metav1.CreateOptions{})
					return err
				}},
				{"patch a Layer2NetworkConfiguration", func() error {
					_, err := asConfigurator.Resource(layer2GVR).Patch(bg, "tenant-b", types.MergePatchType, []byte(`{"spec":{"mtu":9000}}`), metav1.PatchOptions{})
					return err
				}},
				{"list Secrets", func() error {
					_, err := core.CoreV1().Secrets(namespace).List(bg, metav1.ListOptions{})
					return err
				}},
				{"list Nodes", func() error {
					_, err := core.CoreV1().Nodes().List(bg, metav1.ListOptions{})
					return err
				}},
			} {
				if err := f.err(); !apierrors.IsForbidden(err) {
					t.Errorf("the configurator's account may %s: %v, want forbidden", f.what, err)
				}
			}
			if got, err := dyn.Resource(l2).Namespace("net").Get(bg, "tenant-a", metav1.GetOptions{}); err != nil {
				t.Fatal(err)
			} else if vlan, _, _ := unstructured.NestedInt64(got.Object, "spec", "vlan"); vlan != 100 {
				t.Errorf("tenant-a's VLAN %d after the forbidden writes, want 100", vlan)
			}
		})
	}
}
