//go:build kube

package charttest

// The Kubernetes registry on a real API server (package kube; `make
// test-kube`): das-schiff-network-operator's CRDs installed from YAML,
// resources created as kubectl would, synced by a running configurator.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/sluicehq/sluice/deploy/helm/test/kube"
	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/registry"
	sluicerender "github.com/sluicehq/sluice/pkg/render"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/configurator"
)

var (
	crdGVR     = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	layer2GVR  = schema.GroupVersionResource{Group: registry.DasSchiffGroup, Version: "v1alpha1", Resource: "layer2networkconfigurations"}
	vrfRouteGV = schema.GroupVersionResource{Group: registry.DasSchiffGroup, Version: "v1alpha1", Resource: "vrfrouteconfigurations"}
)

// kubectlApply creates every object of a YAML file (documents separated by
// ---) as `kubectl create -f` does.
func kubectlApply(t *testing.T, dyn dynamic.Interface, gvr schema.GroupVersionResource, doc string) {
	t.Helper()
	dec := yaml.NewYAMLOrJSONDecoder(strings.NewReader(doc), 4096)
	for {
		obj := &unstructured.Unstructured{}
		if err := dec.Decode(&obj.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return
			}
			t.Fatalf("decode: %v", err)
		}
		if len(obj.Object) == 0 {
			continue
		}
		if _, err := dyn.Resource(gvr).Create(context.Background(), obj, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s %s: %v", obj.GetKind(), obj.GetName(), err)
		}
	}
}

// installDasSchiffCRDs creates das-schiff's two CRDs and waits until the
// server serves them.
func installDasSchiffCRDs(t *testing.T, dyn dynamic.Interface) {
	t.Helper()
	b, err := os.ReadFile("testdata/das-schiff/crds.yaml")
	if err != nil {
		t.Fatal(err)
	}
	kubectlApply(t, dyn, crdGVR, string(b))
	natstest.Eventually(t, 30*time.Second, "the das-schiff CRDs to be served", func() bool {
		for _, gvr := range []schema.GroupVersionResource{layer2GVR, vrfRouteGV} {
			if _, err := dyn.Resource(gvr).List(context.Background(), metav1.ListOptions{}); err != nil {
				return false
			}
		}
		return true
	})
}

func storedIntent(t *testing.T, env *natstest.Env, key string) *sluicev1.StoredIntent {
	t.Helper()
	e, err := store.New(env.Buckets.Intents, func() *sluicev1.StoredIntent { return &sluicev1.StoredIntent{} }).Get(context.Background(), key)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		t.Fatalf("read intent %s: %v", key, err)
	}
	return e.Value
}

func kubeRegistryStatus(t *testing.T, env *natstest.Env, name string) *sluicev1.RegistryStatus {
	t.Helper()
	e, err := store.New(env.Buckets.Registries, func() *sluicev1.RegistryStatus { return &sluicev1.RegistryStatus{} }).Get(context.Background(), name)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		t.Fatalf("read registry status: %v", err)
	}
	return e.Value
}

// invalidRule is the rule of the status's invalid entry for intent and
// field ("" when none).
func invalidRule(st *sluicev1.RegistryStatus, in, field string) string {
	for _, fe := range st.GetInvalid() {
		if fe.GetIntent() == in && fe.GetField() == field {
			return fe.GetRule()
		}
	}
	return ""
}

// TestKube_Registry_DasSchiff: das-schiff's CRDs installed from YAML, a
// Layer2NetworkConfiguration and a VRFRouteConfiguration created as
// kubectl would, and a configurator syncing a `--kubernetes` registry:
// each resource is an intent, a field sluice has no meaning for is on the
// registry's status, an invalid one carries the configurator's field
// error, and the API server stopped leaves everything as it was.
func TestKube_Registry_DasSchiff(t *testing.T) {
	c := kube.Start(t)
	dyn := dynamicClient(t, c)
	installDasSchiffCRDs(t, dyn)
	kubectlApply(t, dyn, layer2GVR, `apiVersion: network.t-caas.telekom.com/v1alpha1
kind: Layer2NetworkConfiguration
metadata:
  name: tenant-a
spec:
  id: 100
  mtu: 9000
  vni: 10100
  anycastMac: "00:00:5e:00:01:01"
  anycastGateways: [10.0.100.1/24]
  vrf: tenant
  nodeSelector:
    matchLabels: {rack: r1}
---
apiVersion: network.t-caas.telekom.com/v1alpha1
kind: Layer2NetworkConfiguration
metadata:
  name: too-high
spec: {id: 5000, mtu: 1500, vni: 10500}
`)
	kubectlApply(t, dyn, vrfRouteGV, `apiVersion: network.t-caas.telekom.com/v1alpha1
kind: VRFRouteConfiguration
metadata:
  name: leak
spec:
  vrf: tenant
  seq: 10
  import: [{cidr: 10.1.0.0/16, le: 24, action: permit}]
  export: [{cidr: 10.0.100.0/24, action: permit}]
  community: "65000:100"
`)

	env := natstest.Start(t, contract.DefaultSettings())
	svc, err := configurator.New(configurator.Config{Conn: env.Connect(t), Settings: env.Settings, Log: zerolog.New(zerolog.NewTestWriter(t))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	spec := &sluicev1.RegistrySpec{Name: "das-schiff", SyncInterval: durationpb.New(time.Second),
		Source: &sluicev1.RegistrySpec_Kubernetes{Kubernetes: &sluicev1.KubernetesRegistry{Kubeconfig: c.Kubeconfig(t, c.Token)}}}
	if _, err := store.New(env.Buckets.Control, func() *sluicev1.RegistrySpec { return &sluicev1.RegistrySpec{} }).
		Create(context.Background(), contract.RegistryKey("das-schiff"), spec); err != nil {
		t.Fatal(err)
	}

	natstest.Eventually(t, 30*time.Second, "tenant-a and leak synced", func() bool {
		a, l := storedIntent(t, env, "layer2network.tenant-a"), storedIntent(t, env, "vrfroute.leak")
		return a.GetSource() == "das-schiff" && l.GetSource() == "das-schiff"
	})
	a := storedIntent(t, env, "layer2network.tenant-a")
	if l2 := a.GetIntent().GetLayer2Network(); a.GetOrigin() != "Layer2NetworkConfiguration/tenant-a" || l2.GetVlan() != 100 || l2.GetVni() != 10100 ||
		l2.GetMtu() != 9000 || l2.GetVrf() != "tenant" || l2.GetNodeSelector().GetMatchLabels()["rack"] != "r1" {
		t.Errorf("tenant-a stored as %v", a)
	}
	if v := storedIntent(t, env, "vrfroute.leak").GetIntent().GetVrfRoute(); v.GetSequence() != 10 || v.GetImport()[0].GetLe() != 24 || v.GetCommunity() != "65000:100" {
		t.Errorf("leak stored as %v", v)
	}
	var st *sluicev1.RegistryStatus
	natstest.Eventually(t, 30*time.Second, "the status to report anycastMac and too-high's VLAN", func() bool {
		st = kubeRegistryStatus(t, env, "das-schiff")
		return st.GetState() == sluicev1.RegistryState_REGISTRY_STATE_SYNCED && st.GetKind() == "kubernetes" &&
			strings.Contains(invalidRule(st, "Layer2NetworkConfiguration/tenant-a", ""), "spec.anycastMac: sluice has no meaning") &&
			strings.Contains(invalidRule(st, "layer2network/too-high", "spec.vlan"), "5000 is outside 1-4094")
	})
	if storedIntent(t, env, "layer2network.too-high") != nil {
		t.Errorf("too-high, refused, is stored")
	}

	// The API server gone: unreachable, nothing changed.
	c.Stop()
	natstest.Eventually(t, 30*time.Second, "the registry to be unreachable", func() bool {
		st = kubeRegistryStatus(t, env, "das-schiff")
		return st.GetState() == sluicev1.RegistryState_REGISTRY_STATE_UNREACHABLE && strings.Contains(st.GetError(), "list Layer2NetworkConfiguration")
	})
	if a := storedIntent(t, env, "layer2network.tenant-a"); a == nil || a.GetMarkedForDeletion() {
		t.Errorf("with the API server gone, tenant-a is %v", a)
	}
}

// TestKube_Registry_NeedsListOnTheResources: a ServiceAccount without RBAC
// is forbidden (an error, never an empty answer); a ClusterRole with list
// and watch on the two resources is what the registry needs.
func TestKube_Registry_NeedsListOnTheResources(t *testing.T) {
	c := kube.Start(t)
	dyn := dynamicClient(t, c)
	installDasSchiffCRDs(t, dyn)
	admin := c.Client(t)
	bg := context.Background()
	const ns, sa = "sluice-test", "configurator"
	token := serviceAccountToken(t, admin, ns, sa)
	r, err := registry.Open(&sluicev1.RegistrySpec{Name: "das-schiff", Source: &sluicev1.RegistrySpec_Kubernetes{
		Kubernetes: &sluicev1.KubernetesRegistry{Kubeconfig: c.Kubeconfig(t, token)}}}, registry.Options{}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	snap, err := r.Fetch(bg)
	if err == nil || !strings.Contains(err.Error(), "forbidden: give the configurator's identity list and watch on layer2networkconfigurations.network.t-caas.telekom.com") {
		t.Fatalf("without RBAC: %v, %d documents; want forbidden", err, len(snap.Documents))
	}

	if _, err := admin.RbacV1().ClusterRoles().Create(bg, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "sluice-das-schiff"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{registry.DasSchiffGroup}, Resources: []string{"layer2networkconfigurations", "vrfrouteconfigurations"},
			Verbs: []string{"list", "watch"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(bg, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "sluice-das-schiff"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "sluice-das-schiff"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: ns}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kubectlApply(t, dyn, layer2GVR, "apiVersion: network.t-caas.telekom.com/v1alpha1\nkind: Layer2NetworkConfiguration\nmetadata: {name: tenant-b}\nspec: {id: 200, mtu: 1500, vni: 10200}\n")
	natstest.Eventually(t, 30*time.Second, "list and watch to be enough", func() bool {
		snap, err = r.Fetch(bg)
		return err == nil
	})
	if len(snap.Documents) != 1 || snap.Documents[0].Origin != "Layer2NetworkConfiguration/tenant-b" || snap.Documents[0].Err != nil {
		t.Fatalf("with list and watch: %+v", snap.Documents)
	}
	// Changed follows a watch that the role allows: a new resource nudges.
	changed := r.Changed()
	time.Sleep(500 * time.Millisecond) // the watch is set up; its first events (the resource listed) may nudge
	select {
	case <-changed:
	default:
	}
	kubectlApply(t, dyn, layer2GVR, "apiVersion: network.t-caas.telekom.com/v1alpha1\nkind: Layer2NetworkConfiguration\nmetadata: {name: tenant-c}\nspec: {id: 300, mtu: 1500, vni: 10300}\n")
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatalf("no change notice within 10s of a new resource (note %q)", r.Note())
	}
}

// TestKube_Registry_SluiceKinds: the chart's CRDs of sluice's own kinds
// installed, the server's validation refuses a VLAN out of range naming the
// field, and the registry reads the resources of its namespace only, each
// as the intent its spec declares.
func TestKube_Registry_SluiceKinds(t *testing.T) {
	c := kube.Start(t)
	dyn := dynamicClient(t, c)
	b, err := os.ReadFile(chartDir + "/crds/sluice.dev.yaml")
	if err != nil {
		t.Fatal(err)
	}
	kubectlApply(t, dyn, crdGVR, string(b))
	l2 := schema.GroupVersionResource{Group: registry.SluiceGroup, Version: "v1alpha1", Resource: "layer2networks"}
	rt := schema.GroupVersionResource{Group: registry.SluiceGroup, Version: "v1alpha1", Resource: "routingtables"}
	natstest.Eventually(t, 30*time.Second, "sluice's CRDs to be served", func() bool {
		_, err := dyn.Resource(l2).List(context.Background(), metav1.ListOptions{})
		return err == nil
	})
	admin := c.Client(t)
	for _, ns := range []string{"net", "other"} {
		if _, err := admin.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	create := func(gvr schema.GroupVersionResource, ns, doc string) error {
		obj := &unstructured.Unstructured{}
		if err := yaml.NewYAMLOrJSONDecoder(strings.NewReader(doc), 4096).Decode(&obj.Object); err != nil {
			t.Fatal(err)
		}
		_, err := dyn.Resource(gvr).Namespace(ns).Create(context.Background(), obj, metav1.CreateOptions{})
		return err
	}
	for _, r := range []struct {
		gvr     schema.GroupVersionResource
		ns, doc string
	}{
		{l2, "net", "apiVersion: sluice.dev/v1alpha1\nkind: Layer2Network\nmetadata: {name: tenant-a}\nspec: {vlan: 100, vni: 10100, anycastGateways: [10.0.100.1/24], vrf: tenant}\n"},
		{rt, "net", "apiVersion: sluice.dev/v1alpha1\nkind: RoutingTable\nmetadata: {name: lab}\nspec: {tableId: 42}\n"},
		{l2, "other", "apiVersion: sluice.dev/v1alpha1\nkind: Layer2Network\nmetadata: {name: elsewhere}\nspec: {vlan: 200, vni: 10200}\n"},
	} {
		if err := create(r.gvr, r.ns, r.doc); err != nil {
			t.Fatalf("create: %v\n%s", err, r.doc)
		}
	}
	err = create(l2, "net", "apiVersion: sluice.dev/v1alpha1\nkind: Layer2Network\nmetadata: {name: too-high}\nspec: {vlan: 5000, vni: 10500}\n")
	if err == nil || !strings.Contains(err.Error(), "spec.vlan") {
		t.Errorf("a VLAN of 5000: %v; want the server to refuse it naming spec.vlan", err)
	}

	r, err := registry.Open(&sluicev1.RegistrySpec{Name: "sluice-crs", Source: &sluicev1.RegistrySpec_Kubernetes{Kubernetes: &sluicev1.KubernetesRegistry{
		Kubeconfig: c.Kubeconfig(t, c.Token), Namespace: "net", Kinds: []string{"Layer2Network", "VRFRoute", "RoutingTable"}}}}, registry.Options{}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	snap, err := r.Fetch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]*sluicev1.Intent{
		"Layer2Network/net/tenant-a": {Name: "tenant-a", Spec: &sluicev1.Intent_Layer2Network{Layer2Network: &sluicev1.Layer2Network{
			Vlan: 100, Vni: 10100, AnycastGateways: []string{"10.0.100.1/24"}, Vrf: "tenant"}}},
		"RoutingTable/net/lab": {Name: "lab", Spec: &sluicev1.Intent_RoutingTable{RoutingTable: &sluicev1.RoutingTable{TableId: 42}}},
	}
	if len(snap.Documents) != len(want) {
		t.Errorf("%d documents, want %d (namespace net's)", len(snap.Documents), len(want))
	}
	for _, d := range snap.Documents {
		if d.Err != nil || len(d.Intents) != 1 || !proto.Equal(d.Intents[0], want[d.Origin]) {
			t.Errorf("%s: err %v, intents %v; want %v", d.Origin, d.Err, d.Intents, want[d.Origin])
		}
	}
}

// TestKube_Registry_StatusWriteBack: sluice's own kinds synced by a running
// configurator get the write-back on their status subresource: a valid
// resource is Synced by the head's revision and InForce once that revision
// is in force (rollouts/last-applied, written here as the coordinator
// would: no coordinator runs), an invalid one carries the configurator's
// field error, and syncs with nothing new write nothing (the
// resourceVersions stay).
func TestKube_Registry_StatusWriteBack(t *testing.T) {
	c := kube.Start(t)
	dyn := dynamicClient(t, c)
	b, err := os.ReadFile(chartDir + "/crds/sluice.dev.yaml")
	if err != nil {
		t.Fatal(err)
	}
	kubectlApply(t, dyn, crdGVR, string(b))
	l2 := schema.GroupVersionResource{Group: registry.SluiceGroup, Version: "v1alpha1", Resource: "layer2networks"}
	natstest.Eventually(t, 30*time.Second, "sluice's CRDs to be served", func() bool {
		_, err := dyn.Resource(l2).Namespace("net").List(context.Background(), metav1.ListOptions{})
		return err == nil
	})
	bg := context.Background()
	if _, err := c.Client(t).CoreV1().Namespaces().Create(bg, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "net"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, doc := range []string{
		"apiVersion: sluice.dev/v1alpha1\nkind: Layer2Network\nmetadata: {name: tenant-a}\nspec: {vlan: 100, vni: 10100, anycastGateways: [10.0.100.1/24], vrf: tenant}\n",
		// The CRD's schema lets it through; the configurator's rule does not.
		"apiVersion: sluice.dev/v1alpha1\nkind: Layer2Network\nmetadata: {name: no-vrf}\nspec: {vlan: 200, vni: 10200, anycastGateways: [10.0.200.1/24]}\n",
	} {
		obj := &unstructured.Unstructured{}
		if err := yaml.NewYAMLOrJSONDecoder(strings.NewReader(doc), 4096).Decode(&obj.Object); err != nil {
			t.Fatal(err)
		}
		if _, err := dyn.Resource(l2).Namespace("net").Create(bg, obj, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create: %v\n%s", err, doc)
		}
	}

	env := natstest.Start(t, contract.DefaultSettings())
	svc, err := configurator.New(configurator.Config{Conn: env.Connect(t), Settings: env.Settings, Log: zerolog.New(zerolog.NewTestWriter(t))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(bg)
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	spec := &sluicev1.RegistrySpec{Name: "crs", SyncInterval: durationpb.New(time.Second),
		Source: &sluicev1.RegistrySpec_Kubernetes{Kubernetes: &sluicev1.KubernetesRegistry{
			Kubeconfig: c.Kubeconfig(t, c.Token), Namespace: "net", Kinds: []string{"Layer2Network"}}}}
	if _, err := store.New(env.Buckets.Control, func() *sluicev1.RegistrySpec { return &sluicev1.RegistrySpec{} }).
		Create(bg, contract.RegistryKey("crs"), spec); err != nil {
		t.Fatal(err)
	}

	get := func(name string) *unstructured.Unstructured {
		obj, err := dyn.Resource(l2).Namespace("net").Get(bg, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get %s: %v", name, err)
		}
		return obj
	}
	cond := func(obj *unstructured.Unstructured, typ string) (status, reason, msg string) {
		conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if m["type"] == typ {
				return fmt.Sprint(m["status"]), fmt.Sprint(m["reason"]), fmt.Sprint(m["message"])
			}
		}
		return "", "", ""
	}
	heads := store.New(env.Buckets.Revisions, func() *sluicev1.Head { return &sluicev1.Head{} })
	var head *sluicev1.Head
	natstest.Eventually(t, 30*time.Second, "tenant-a Synced by the head, not in force yet", func() bool {
		h, err := heads.Get(bg, contract.KeyHead)
		if err != nil {
			return false
		}
		head = h.Value
		obj := get("tenant-a")
		rev, _, _ := unstructured.NestedString(obj.Object, "status", "revision")
		s, _, msg := cond(obj, "Synced")
		f, reason, _ := cond(obj, "InForce")
		return s == "True" && rev == head.GetRevision() && strings.Contains(msg, head.GetRevision()[:12]) && f == "False" && reason == "RollingOut"
	})
	natstest.Eventually(t, 30*time.Second, "no-vrf refused with the configurator's field error", func() bool {
		s, reason, msg := cond(get("no-vrf"), "Synced")
		return s == "False" && reason == "Refused" && strings.Contains(msg, "layer2network/no-vrf: spec.vrf: is required when anycastGateways are set")
	})

	// Nothing new: syncs go on (every second) and write nothing.
	rv := map[string]string{"tenant-a": get("tenant-a").GetResourceVersion(), "no-vrf": get("no-vrf").GetResourceVersion()}
	first := kubeRegistryStatus(t, env, "crs").GetLastSync().AsTime()
	natstest.Eventually(t, 30*time.Second, "three more syncs", func() bool {
		return kubeRegistryStatus(t, env, "crs").GetLastSync().AsTime().Sub(first) >= 3*time.Second
	})
	for name, v := range rv {
		if got := get(name).GetResourceVersion(); got != v {
			t.Errorf("%s: resourceVersion %s after syncs with nothing new, was %s: a status write per sync", name, got, v)
		}
	}

	// The head's revision in force, as the coordinator records it.
	if _, err := store.New(env.Buckets.Rollouts, func() *sluicev1.RolloutRef { return &sluicev1.RolloutRef{} }).Create(bg, contract.KeyLastApplied,
		&sluicev1.RolloutRef{Rollout: "r1", Revision: head.GetRevision(), Generation: head.GetGeneration()}); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 30*time.Second, "tenant-a InForce", func() bool {
		f, reason, _ := cond(get("tenant-a"), "InForce")
		return f == "True" && reason == "RolledOut"
	})
	if s, _, _ := cond(get("no-vrf"), "InForce"); s != "False" {
		t.Errorf("no-vrf, refused, InForce %q", s)
	}
	if n := kubeRegistryStatus(t, env, "crs").GetNote(); n != "" {
		t.Errorf("registry note %q, want none (every status written)", n)
	}
	// kubectl get layer2networks: the columns, as the server prints them.
	table, err := c.Client(t).CoreV1().RESTClient().Get().AbsPath("/apis/sluice.dev/v1alpha1/namespaces/net/layer2networks/tenant-a").
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").DoRaw(bg)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"name":"Synced"`, `"name":"InForce"`, `"name":"Revision"`, `"True","True","` + head.GetRevision() + `"`} {
		if !strings.Contains(string(table), want) {
			t.Errorf("kubectl get's table lacks %s: %s", want, table)
		}
	}

	// A no-op patch leaves the resourceVersion as it was, so count the
	// writes themselves: the same outcomes reported again write nothing.
	r, err := registry.Open(spec, registry.Options{}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	if _, err := r.Fetch(bg); err != nil {
		t.Fatal(err)
	}
	_, _, refused := cond(get("no-vrf"), "Synced")
	rev := registry.Revision{ID: head.GetRevision(), Generation: head.GetGeneration()}
	same := []registry.Outcome{{Origin: "Layer2Network/net/tenant-a", Head: rev, InForce: rev, InForceHolds: true},
		{Origin: "Layer2Network/net/no-vrf", Head: rev, InForce: rev, Refused: refused}}
	if n, err := r.(registry.Reporter).Report(bg, same, time.Now()); n != 0 || err != nil {
		t.Errorf("the outcomes the status already says: %d written (%v), want none", n, err)
	}
	same[0].InForce = registry.Revision{}
	if n, err := r.(registry.Reporter).Report(bg, same, time.Now()); n != 1 || err != nil {
		t.Errorf("tenant-a no longer in force: %d written (%v), want 1", n, err)
	}

	// sluice rollout undo back past tenant-a's revision: a later generation
	// is in force whose revision does not hold tenant-a (written here as
	// the configurator and the coordinator would).
	other := []*sluicev1.Intent{{Name: "lab", Spec: &sluicev1.Intent_RoutingTable{RoutingTable: &sluicev1.RoutingTable{TableId: 42}}}}
	undone := sluicerender.RevisionID(other)
	if _, err := store.New(env.Buckets.Revisions, func() *sluicev1.Revision { return &sluicev1.Revision{} }).Create(bg, undone,
		&sluicev1.Revision{Id: undone, Intents: other}); err != nil {
		t.Fatal(err)
	}
	if _, err := store.New(env.Buckets.Rollouts, func() *sluicev1.RolloutRef { return &sluicev1.RolloutRef{} }).Mutate(bg, contract.KeyLastApplied,
		func(*sluicev1.RolloutRef) (*sluicev1.RolloutRef, error) {
			return &sluicev1.RolloutRef{Rollout: "r2", Revision: undone, Generation: head.GetGeneration() + 1}, nil
		}); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 30*time.Second, "tenant-a superseded: the revision in force does not hold it", func() bool {
		f, reason, msg := cond(get("tenant-a"), "InForce")
		return f == "False" && reason == "Superseded" && strings.Contains(msg, undone[:12])
	})
}

// TestKube_Registry_StatusWithoutPatch_SyncGoesOn: an identity with list
// and watch on sluice's kinds but not patch on their status syncs all the
// same, the registry's status noting the writes that failed; granted patch
// on <resource>/status, the next sync writes the status and the note goes.
func TestKube_Registry_StatusWithoutPatch_SyncGoesOn(t *testing.T) {
	c := kube.Start(t)
	dyn := dynamicClient(t, c)
	b, err := os.ReadFile(chartDir + "/crds/sluice.dev.yaml")
	if err != nil {
		t.Fatal(err)
	}
	kubectlApply(t, dyn, crdGVR, string(b))
	l2 := schema.GroupVersionResource{Group: registry.SluiceGroup, Version: "v1alpha1", Resource: "layer2networks"}
	natstest.Eventually(t, 30*time.Second, "sluice's CRDs to be served", func() bool {
		_, err := dyn.Resource(l2).List(context.Background(), metav1.ListOptions{})
		return err == nil
	})
	admin, bg := c.Client(t), context.Background()
	const ns, sa = "net", "configurator"
	token := serviceAccountToken(t, admin, ns, sa)
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "sluice-crs", Namespace: ns},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{registry.SluiceGroup}, Resources: []string{"layer2networks"}, Verbs: []string{"list", "watch"}}}}
	if _, err := admin.RbacV1().Roles(ns).Create(bg, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().RoleBindings(ns).Create(bg, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "sluice-crs", Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "sluice-crs"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: ns}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	obj := &unstructured.Unstructured{}
	if err := yaml.NewYAMLOrJSONDecoder(strings.NewReader(
		"apiVersion: sluice.dev/v1alpha1\nkind: Layer2Network\nmetadata: {name: tenant-a}\nspec: {vlan: 100, vni: 10100}\n"), 4096).Decode(&obj.Object); err != nil {
		t.Fatal(err)
	}
	if _, err := dyn.Resource(l2).Namespace(ns).Create(bg, obj, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	env := natstest.Start(t, contract.DefaultSettings())
	svc, err := configurator.New(configurator.Config{Conn: env.Connect(t), Settings: env.Settings, Log: zerolog.New(zerolog.NewTestWriter(t))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(bg)
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	spec := &sluicev1.RegistrySpec{Name: "crs", SyncInterval: durationpb.New(time.Second),
		Source: &sluicev1.RegistrySpec_Kubernetes{Kubernetes: &sluicev1.KubernetesRegistry{
			Kubeconfig: c.Kubeconfig(t, token), Namespace: ns, Kinds: []string{"Layer2Network"}}}}
	if _, err := store.New(env.Buckets.Control, func() *sluicev1.RegistrySpec { return &sluicev1.RegistrySpec{} }).
		Create(bg, contract.RegistryKey("crs"), spec); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 30*time.Second, "tenant-a synced, the failed status write noted", func() bool {
		st := kubeRegistryStatus(t, env, "crs")
		return storedIntent(t, env, "layer2network.tenant-a").GetSource() == "crs" &&
			st.GetState() == sluicev1.RegistryState_REGISTRY_STATE_SYNCED && strings.Contains(st.GetNote(), "status not written on 1 resource(s)") &&
			strings.Contains(st.GetNote(), "forbidden") && strings.Contains(st.GetNote(), "patch on <resource>/status")
	})
	got, err := dyn.Resource(l2).Namespace(ns).Get(bg, "tenant-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := got.Object["status"]; ok {
		t.Errorf("status written without patch on layer2networks/status: %v", got.Object["status"])
	}

	role.Rules = append(role.Rules, rbacv1.PolicyRule{APIGroups: []string{registry.SluiceGroup}, Resources: []string{"layer2networks/status"}, Verbs: []string{"patch"}})
	if _, err := admin.RbacV1().Roles(ns).Update(bg, role, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 30*time.Second, "the status written and the note gone", func() bool {
		got, err := dyn.Resource(l2).Namespace(ns).Get(bg, "tenant-a", metav1.GetOptions{})
		if err != nil {
			return false
		}
		rev, _, _ := unstructured.NestedString(got.Object, "status", "revision")
		return rev != "" && kubeRegistryStatus(t, env, "crs").GetNote() == ""
	})
}

// serviceAccountToken creates namespace ns and ServiceAccount sa in it and
// returns an hour's token of that account.
func serviceAccountToken(t *testing.T, admin kubernetes.Interface, ns, sa string) string {
	t.Helper()
	bg := context.Background()
	if _, err := admin.CoreV1().Namespaces().Create(bg, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().ServiceAccounts(ns).Create(bg, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	exp := int64(3600)
	tr, err := admin.CoreV1().ServiceAccounts(ns).CreateToken(bg, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: []string{"https://kubernetes.default.svc"}, ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}
