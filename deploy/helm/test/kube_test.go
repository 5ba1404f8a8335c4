//go:build kube

package charttest

// Tests on a real Kubernetes API server and etcd (package kube; `make
// test-kube`): the chart installed, upgraded and uninstalled with the helm
// SDK, and the agent reading its Node with the chart's RBAC.

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/releaseutil"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/sluicehq/sluice/deploy/helm/test/kube"
	"github.com/sluicehq/sluice/internal/testkit/testproc"
)

// helmConfig is a helm action configuration talking to c as its
// administrator, releases stored as Secrets in namespace.
func helmConfig(t *testing.T, c *kube.Cluster) *action.Configuration {
	t.Helper()
	flags := genericclioptions.NewConfigFlags(false)
	path := c.Kubeconfig(t, c.Token)
	flags.KubeConfig = &path
	ns := namespace
	flags.Namespace = &ns
	cfg := &action.Configuration{}
	if err := cfg.Init(flags, namespace, "secret", func(format string, v ...any) { t.Logf("helm: "+format, v...) }); err != nil {
		t.Fatalf("helm configuration: %v", err)
	}
	return cfg
}

func loadValues(t *testing.T, valuesFile string) map[string]any {
	t.Helper()
	if valuesFile == "" {
		return map[string]any{}
	}
	vals, err := chartutil.ReadValuesFile(valuesFile)
	if err != nil {
		t.Fatal(err)
	}
	return vals
}

// kindResources maps a rendered object's kind to its API resource.
var kindResources = map[string]schema.GroupVersionResource{
	"ConfigMap":           {Version: "v1", Resource: "configmaps"},
	"ServiceAccount":      {Version: "v1", Resource: "serviceaccounts"},
	"Service":             {Version: "v1", Resource: "services"},
	"Secret":              {Version: "v1", Resource: "secrets"},
	"Deployment":          {Group: "apps", Version: "v1", Resource: "deployments"},
	"DaemonSet":           {Group: "apps", Version: "v1", Resource: "daemonsets"},
	"PodDisruptionBudget": {Group: "policy", Version: "v1", Resource: "poddisruptionbudgets"},
	"ClusterRole":         {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"},
	"ClusterRoleBinding":  {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"},
}

var clusterScoped = map[string]bool{"ClusterRole": true, "ClusterRoleBinding": true}

// stored lists every object of the kinds the chart renders that carries
// the release's instance label, as "Kind/name", sorted.
func stored(t *testing.T, dyn dynamic.Interface) []string {
	t.Helper()
	var out []string
	for kind, gvr := range kindResources {
		var ri dynamic.ResourceInterface = dyn.Resource(gvr)
		if !clusterScoped[kind] {
			ri = dyn.Resource(gvr).Namespace(namespace)
		}
		l, err := ri.List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + releaseName})
		if err != nil {
			t.Fatalf("list %s: %v", gvr.Resource, err)
		}
		for _, it := range l.Items {
			out = append(out, kind+"/"+it.GetName())
		}
	}
	slices.Sort(out)
	return out
}

// renderedKeys is every object of a release manifest as "Kind/name", sorted.
func renderedKeys(t *testing.T, manifest string) []string {
	t.Helper()
	var out []string
	for _, doc := range releaseutil.SplitManifests(manifest) {
		var head struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatalf("rendered object: %v\n%s", err, doc)
		}
		if head.Kind == "" {
			continue
		}
		if _, ok := kindResources[head.Kind]; !ok {
			t.Fatalf("the chart renders a %s (%s), which this test does not look up on the server", head.Kind, head.Metadata.Name)
		}
		out = append(out, head.Kind+"/"+head.Metadata.Name)
	}
	slices.Sort(out)
	return out
}

func dynamicClient(t *testing.T, c *kube.Cluster) dynamic.Interface {
	t.Helper()
	d, err := dynamic.NewForConfig(c.Config(c.Token))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestKube_Chart_InstallUpgradeUninstall installs the chart with its
// defaults, then with every component authenticated and encrypted, into a
// real API server: the server's validation accepts every object the chart
// renders (each is then stored, with the release's labels), an upgrade to
// other values replaces them, and an uninstall leaves none behind (helm's
// release records included).
func TestKube_Chart_InstallUpgradeUninstall(t *testing.T) {
	c := kube.Start(t)
	cfg := helmConfig(t, c)
	dyn := dynamicClient(t, c)
	chrt, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, install, upgrade string }{
		{"defaults", "", "testdata/services-scaled.yaml"},
		{"auth-tls", "testdata/auth-tls.yaml", "testdata/agent-netlink.yaml"},
		// The upgrade turns the Kubernetes registry's ServiceAccount and
		// roles off: they must go.
		{"kube-registry", "testdata/kube-registry.yaml", "testdata/git-cache-emptydir.yaml"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inst := action.NewInstall(cfg)
			inst.ReleaseName, inst.Namespace, inst.CreateNamespace = releaseName, namespace, true
			inst.Timeout = time.Minute
			rel, err := inst.Run(chrt, loadValues(t, tc.install))
			if err != nil {
				t.Fatalf("helm install with %q: %v", tc.install, err)
			}
			want := renderedKeys(t, rel.Manifest)
			if got := stored(t, dyn); !slices.Equal(got, want) {
				t.Fatalf("after install the server holds %v, want what the chart rendered: %v", got, want)
			}
			up := action.NewUpgrade(cfg)
			up.Namespace, up.Timeout = namespace, time.Minute
			rel, err = up.Run(releaseName, chrt, loadValues(t, tc.upgrade))
			if err != nil {
				t.Fatalf("helm upgrade to %q: %v", tc.upgrade, err)
			}
			want = renderedKeys(t, rel.Manifest)
			if got := stored(t, dyn); !slices.Equal(got, want) {
				t.Fatalf("after upgrade the server holds %v, want %v", got, want)
			}
			un := action.NewUninstall(cfg)
			un.Timeout = time.Minute
			if _, err := un.Run(releaseName); err != nil {
				t.Fatalf("helm uninstall: %v", err)
			}
			if got := stored(t, dyn); len(got) != 0 {
				t.Errorf("after uninstall the server still holds %v", got)
			}
			secrets, err := c.Client(t).CoreV1().Secrets(namespace).List(context.Background(), metav1.ListOptions{LabelSelector: "owner=helm,name=" + releaseName})
			if err != nil {
				t.Fatal(err)
			}
			if len(secrets.Items) != 0 {
				t.Errorf("after uninstall helm's release records remain: %d Secrets", len(secrets.Items))
			}
		})
	}
}

// TestKube_Chart_ServerRefusesABrokenObject: a value the chart's schema and
// templates let through but the API server's validation refuses (a
// nodeSelector key that is no label key) fails the install with the
// server's message naming the field, and nothing of the release is left.
func TestKube_Chart_ServerRefusesABrokenObject(t *testing.T) {
	c := kube.Start(t)
	cfg := helmConfig(t, c)
	chrt, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	vals := map[string]any{"configurator": map[string]any{"nodeSelector": map[string]any{"not a label key!": "x"}}}
	inst := action.NewInstall(cfg)
	inst.ReleaseName, inst.Namespace, inst.CreateNamespace = releaseName, namespace, true
	inst.Timeout = time.Minute
	_, err = inst.Run(chrt, vals)
	if err == nil {
		t.Fatal("install with a nodeSelector key that is no label key succeeded")
	}
	for _, want := range []string{"spec.template.spec.nodeSelector", "not a label key!"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("install error %q does not name %q", err, want)
		}
	}
	t.Logf("refused: %v", err)
}

// TestKube_Agent_ReadsItsNodeWithTheChartsRBAC runs the agent binary with
// --kube-node-labels against the API server, authenticated as the chart's
// agent ServiceAccount (a token from the TokenRequest API, as a pod's
// projected token is): the chart's RBAC lets it read Nodes and nothing
// more, the agent registers with its Node's labels, and a label changed on
// the Node reaches sluice (`sluice get node`) within a second.
func TestKube_Agent_ReadsItsNodeWithTheChartsRBAC(t *testing.T) {
	c := kube.Start(t)
	cfg := helmConfig(t, c)
	chrt, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	inst := action.NewInstall(cfg)
	inst.ReleaseName, inst.Namespace, inst.CreateNamespace = releaseName, namespace, true
	rel, err := inst.Run(chrt, map[string]any{})
	if err != nil {
		t.Fatalf("helm install: %v", err)
	}
	sa := ""
	for _, k := range renderedKeys(t, rel.Manifest) {
		if name, ok := strings.CutPrefix(k, "ServiceAccount/"); ok && strings.Contains(name, "agent") {
			sa = name
		}
	}
	if sa == "" {
		t.Fatalf("the chart rendered no agent ServiceAccount: %v", renderedKeys(t, rel.Manifest))
	}
	admin := c.Client(t)
	ctx := context.Background()
	const node = "node-01"
	if _, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node,
		Labels: map[string]string{"topology.kubernetes.io/zone": "zone-a", "rack": "r1"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	exp := int64(3600)
	tr, err := admin.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: []string{"https://kubernetes.default.svc"}, ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for %s: %v", sa, err)
	}
	// What the chart's RBAC grants: Nodes read, nothing written, no Secrets.
	asAgent, err := kubernetes.NewForConfig(c.Config(tr.Status.Token))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := asAgent.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); err != nil {
		t.Fatalf("the agent's ServiceAccount cannot read its Node: %v", err)
	}
	if _, err := asAgent.CoreV1().Secrets(namespace).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the agent's ServiceAccount listing Secrets: %v, want forbidden", err)
	}
	n, _ := asAgent.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	n.Labels["stolen"] = "yes"
	if _, err := asAgent.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the agent's ServiceAccount updating a Node: %v, want forbidden", err)
	}

	// sluice dev with no agents of its own, and the real agent beside it.
	data := t.TempDir()
	listen := kube.FreeAddr(t)
	url := "nats://" + listen
	dev := exec.Command(binary(t, "sluice"), "dev", "--agents", "0", "--listen", listen, "--data", data, "--dashboard-addr", "off")
	devProc, err := testproc.Start(dev)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dev.Process.Signal(os.Interrupt); <-devProc.Exited() })
	agentCmd := exec.Command(binary(t, "sluice-agent"), "--node", node, "--kube-node-labels",
		"--kubeconfig", c.Kubeconfig(t, tr.Status.Token), "--state-dir", filepath.Join(t.TempDir(), "state"))
	agentCmd.Env = append(os.Environ(), "SLUICE_NATS_URL="+url)
	agentProc, err := testproc.Start(agentCmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = agentCmd.Process.Signal(os.Interrupt); <-agentProc.Exited() })

	labelsSeen := func() map[string]string {
		cmd := exec.Command(binary(t, "sluice"), "get", "node", node, "-o", "json")
		cmd.Env = append(os.Environ(), "SLUICE_NATS_URL="+url)
		out, err := cmd.Output()
		if err != nil {
			return nil
		}
		var obj struct {
			Items []struct {
				Presence struct {
					Labels map[string]string `json:"labels"`
				} `json:"presence"`
			} `json:"items"`
		}
		if json.Unmarshal(out, &obj) != nil || len(obj.Items) != 1 {
			return nil
		}
		return obj.Items[0].Presence.Labels
	}
	waitLabels := func(within time.Duration, want map[string]string) time.Duration {
		t.Helper()
		start := time.Now()
		var got map[string]string
		for time.Since(start) < within {
			if got = labelsSeen(); got != nil && subset(want, got) {
				return time.Since(start)
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Fatalf("within %s sluice shows %s's labels %v, want %v among them\nagent:\n%s\nsluice dev:\n%s", within, node, got, want, agentProc.Output(), devProc.Output())
		return 0
	}
	waitLabels(60*time.Second, map[string]string{"topology.kubernetes.io/zone": "zone-a", "rack": "r1"})

	n, err = admin.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Labels["rack"] = "r2"
	if _, err := admin.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	took := waitLabels(time.Second, map[string]string{"rack": "r2"})
	t.Logf("a label changed on the Node reached sluice in %s", took.Round(time.Millisecond))

	// The Node deleted: the agent withdraws its presence (the node left,
	// well within the node lease, not by lapsing) and says why; created
	// again, the node registers again with the new Node's labels.
	sluiceCmd := func(args ...string) ([]byte, error) {
		cmd := exec.Command(binary(t, "sluice"), args...)
		cmd.Env = append(os.Environ(), "SLUICE_NATS_URL="+url)
		return cmd.Output()
	}
	present := func() bool {
		out, err := sluiceCmd("get", "nodes", "-o", "json")
		var obj struct {
			Items []struct {
				Node    string `json:"node"`
				Present bool   `json:"present"`
			} `json:"items"`
		}
		if err != nil || json.Unmarshal(out, &obj) != nil {
			return true // unknown: not taken as gone
		}
		for _, it := range obj.Items {
			if it.Node == node && it.Present {
				return true
			}
		}
		return false
	}
	start := time.Now()
	if err := admin.CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for present() {
		if time.Since(start) > 5*time.Second {
			t.Fatalf("5s after its Node was deleted, sluice still shows %s present\nagent:\n%s", node, agentProc.Output())
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("a deleted Node left sluice in %s", time.Since(start).Round(time.Millisecond))
	out, err := sluiceCmd("events", "--node", node, "--type", "NodeLeft", "-o", "json")
	if err != nil || !strings.Contains(string(out), "its Kubernetes Node "+node+" was deleted") {
		t.Errorf("sluice events --type NodeLeft: %v\n%s\nwant a NodeLeft event naming the deleted Node", err, out)
	}
	if _, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node,
		Labels: map[string]string{"topology.kubernetes.io/zone": "zone-b", "rack": "r3"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitLabels(5*time.Second, map[string]string{"topology.kubernetes.io/zone": "zone-b", "rack": "r3"})
}

func subset(want, got map[string]string) bool {
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}
