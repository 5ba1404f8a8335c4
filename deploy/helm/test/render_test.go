package charttest

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/releaseutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// chartDir is the chart under test.
const chartDir = "../sluice"

// Where every test installs the chart.
const (
	releaseName = "sl"
	namespace   = "sluice-system"
)

// kubeVersion is the cluster version the chart is rendered for.
var kubeVersion = &chartutil.KubeVersion{Version: "v1.31.0", Major: "1", Minor: "31"}

// kinds are the objects the chart may render, each with the API type it is
// decoded into. Anything else is a test failure.
var kinds = map[string]func() any{
	"v1/ConfigMap":                                    func() any { return &corev1.ConfigMap{} },
	"v1/PersistentVolumeClaim":                        func() any { return &corev1.PersistentVolumeClaim{} },
	"v1/ServiceAccount":                               func() any { return &corev1.ServiceAccount{} },
	"v1/Service":                                      func() any { return &corev1.Service{} },
	"apps/v1/Deployment":                              func() any { return &appsv1.Deployment{} },
	"apps/v1/DaemonSet":                               func() any { return &appsv1.DaemonSet{} },
	"policy/v1/PodDisruptionBudget":                   func() any { return &policyv1.PodDisruptionBudget{} },
	"rbac.authorization.k8s.io/v1/ClusterRole":        func() any { return &rbacv1.ClusterRole{} },
	"rbac.authorization.k8s.io/v1/ClusterRoleBinding": func() any { return &rbacv1.ClusterRoleBinding{} },
	"rbac.authorization.k8s.io/v1/Role":               func() any { return &rbacv1.Role{} },
	"rbac.authorization.k8s.io/v1/RoleBinding":        func() any { return &rbacv1.RoleBinding{} },
}

// objects are a rendered release's objects by "Kind/name", or
// "Kind/namespace/name" for one in another namespace than the release's.
type objects map[string]any

func (o objects) keys() []string {
	k := make([]string, 0, len(o))
	for key := range o {
		k = append(k, key)
	}
	sort.Strings(k)
	return k
}

// get returns the object Kind/name as T, failing the test if there is none.
func get[T any](t *testing.T, o objects, key string) T {
	t.Helper()
	v, ok := o[key].(T)
	if !ok {
		t.Fatalf("no %s among %v", key, o.keys())
	}
	return v
}

// install renders the chart as `helm install --dry-run` does without a
// cluster (client-only): values.schema.json is checked, every template
// rendered, NOTES.txt included. valuesFile "" means the chart's defaults.
func install(valuesFile string) (*release.Release, error) {
	chrt, err := loader.Load(chartDir)
	if err != nil {
		return nil, fmt.Errorf("load chart: %w", err)
	}
	vals := map[string]any{}
	if valuesFile != "" {
		if vals, err = chartutil.ReadValuesFile(valuesFile); err != nil {
			return nil, err
		}
	}
	inst := action.NewInstall(&action.Configuration{})
	inst.DryRun, inst.ClientOnly, inst.Replace = true, true, true
	inst.ReleaseName, inst.Namespace, inst.KubeVersion = releaseName, namespace, kubeVersion
	return inst.Run(chrt, vals)
}

// render installs with valuesFile and decodes every object strictly: a field
// the API type does not have, a value of the wrong type or a duplicate key
// fails the test.
func render(t *testing.T, valuesFile string) (objects, *release.Release) {
	t.Helper()
	rel, err := install(valuesFile)
	if err != nil {
		t.Fatalf("render with %q: %v", valuesFile, err)
	}
	return decode(t, rel.Manifest), rel
}

func decode(t *testing.T, manifest string) objects {
	t.Helper()
	out := objects{}
	docs := releaseutil.SplitManifests(manifest)
	names := make([]string, 0, len(docs))
	for name := range docs {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		doc := docs[name]
		var tm struct {
			metav1.TypeMeta `json:",inline"`
			Metadata        struct {
				Name      string `json:"name"`
				Namespace string `json:"namespace"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
			t.Errorf("%s: %v\n%s", name, err, doc)
			continue
		}
		newObj, ok := kinds[tm.APIVersion+"/"+tm.Kind]
		if !ok {
			t.Errorf("unexpected object %s %s/%s", tm.APIVersion, tm.Kind, tm.Metadata.Name)
			continue
		}
		obj := newObj()
		if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
			t.Errorf("%s/%s does not decode strictly into %T: %v\n%s", tm.Kind, tm.Metadata.Name, obj, err, doc)
			continue
		}
		key := tm.Kind + "/" + tm.Metadata.Name
		if ns := tm.Metadata.Namespace; ns != "" && ns != namespace {
			key = tm.Kind + "/" + ns + "/" + tm.Metadata.Name
		}
		if _, dup := out[key]; dup {
			t.Errorf("%s rendered twice", key)
		}
		out[key] = obj
	}
	return out
}

func TestChart_RendersStrictKubernetesObjects(t *testing.T) {
	tests := []struct {
		name       string
		valuesFile string
		want       []string
	}{
		{name: "defaults", want: []string{
			"ClusterRole/sl-agent", "ClusterRoleBinding/sl-agent", "ConfigMap/sl-agent", "DaemonSet/sl-agent",
			"Deployment/sl-configurator", "Deployment/sl-reaper", "Deployment/sl-rollout-coordinator",
			"PodDisruptionBudget/sl-configurator", "PodDisruptionBudget/sl-reaper", "PodDisruptionBudget/sl-rollout-coordinator",
			"ServiceAccount/sl-agent",
		}},
		{name: "agent with NET_ADMIN, host network, checks", valuesFile: "testdata/agent-netadmin.yaml", want: []string{
			"ClusterRole/sl-agent", "ClusterRoleBinding/sl-agent", "ConfigMap/sl-agent", "DaemonSet/sl-agent",
			"Deployment/sl-configurator", "Deployment/sl-reaper", "Deployment/sl-rollout-coordinator",
			"PodDisruptionBudget/sl-configurator", "PodDisruptionBudget/sl-reaper", "PodDisruptionBudget/sl-rollout-coordinator",
			"ServiceAccount/sl-agent",
		}},
		{name: "agent with the netlink applier", valuesFile: "testdata/agent-netlink.yaml", want: []string{
			"ClusterRole/sl-agent", "ClusterRoleBinding/sl-agent", "ConfigMap/sl-agent", "DaemonSet/sl-agent",
			"Deployment/sl-configurator", "Deployment/sl-reaper", "Deployment/sl-rollout-coordinator",
			"PodDisruptionBudget/sl-configurator", "PodDisruptionBudget/sl-reaper", "PodDisruptionBudget/sl-rollout-coordinator",
			"ServiceAccount/sl-agent",
		}},
		{name: "agent with the netlink and FRR appliers", valuesFile: "testdata/agent-frr.yaml", want: []string{
			"ClusterRole/sl-agent", "ClusterRoleBinding/sl-agent", "ConfigMap/sl-agent", "DaemonSet/sl-agent",
			"Deployment/sl-configurator", "Deployment/sl-reaper", "Deployment/sl-rollout-coordinator",
			"PodDisruptionBudget/sl-configurator", "PodDisruptionBudget/sl-reaper", "PodDisruptionBudget/sl-rollout-coordinator",
			"ServiceAccount/sl-agent",
		}},
		{name: "services scaled, no agent", valuesFile: "testdata/services-scaled.yaml", want: []string{
			"Deployment/sl-configurator", "Deployment/sl-reaper", "Deployment/sl-rollout-coordinator",
			"PodDisruptionBudget/sl-configurator", "PodDisruptionBudget/sl-rollout-coordinator",
		}},
		{name: "configurator with a git cache claim", valuesFile: "testdata/git-cache-pvc.yaml", want: []string{
			"ClusterRole/sl-agent", "ClusterRoleBinding/sl-agent", "ConfigMap/sl-agent", "DaemonSet/sl-agent",
			"Deployment/sl-configurator", "Deployment/sl-reaper", "Deployment/sl-rollout-coordinator",
			"PersistentVolumeClaim/sl-configurator-git-cache",
			"PodDisruptionBudget/sl-configurator", "PodDisruptionBudget/sl-reaper", "PodDisruptionBudget/sl-rollout-coordinator",
			"ServiceAccount/sl-agent",
		}},
		{name: "configurator with a git cache emptyDir", valuesFile: "testdata/git-cache-emptydir.yaml", want: []string{
			"ClusterRole/sl-agent", "ClusterRoleBinding/sl-agent", "ConfigMap/sl-agent", "DaemonSet/sl-agent",
			"Deployment/sl-configurator", "Deployment/sl-reaper", "Deployment/sl-rollout-coordinator",
			"PodDisruptionBudget/sl-configurator", "PodDisruptionBudget/sl-reaper", "PodDisruptionBudget/sl-rollout-coordinator",
			"ServiceAccount/sl-agent",
		}},
		{name: "configurator with the Kubernetes registry in every namespace", valuesFile: "testdata/kube-registry.yaml", want: []string{
			"ClusterRole/sl-agent", "ClusterRole/sl-configurator", "ClusterRoleBinding/sl-agent", "ClusterRoleBinding/sl-configurator",
			"ConfigMap/sl-agent", "DaemonSet/sl-agent",
			"Deployment/sl-configurator", "Deployment/sl-reaper", "Deployment/sl-rollout-coordinator",
			"PodDisruptionBudget/sl-configurator", "PodDisruptionBudget/sl-reaper", "PodDisruptionBudget/sl-rollout-coordinator",
			"ServiceAccount/sl-agent", "ServiceAccount/sl-configurator",
		}},
		{name: "configurator with the Kubernetes registry in two namespaces", valuesFile: "testdata/kube-registry-namespaces.yaml", want: []string{
			"ClusterRole/sl-agent", "ClusterRole/sl-configurator", "ClusterRoleBinding/sl-agent", "ClusterRoleBinding/sl-configurator",
			"ConfigMap/sl-agent", "DaemonSet/sl-agent",
			"Deployment/sl-configurator", "Deployment/sl-reaper", "Deployment/sl-rollout-coordinator",
			"PodDisruptionBudget/sl-configurator", "PodDisruptionBudget/sl-reaper", "PodDisruptionBudget/sl-rollout-coordinator",
			"Role/edge/sl-configurator", "Role/net/sl-configurator", "RoleBinding/edge/sl-configurator", "RoleBinding/net/sl-configurator",
			"ServiceAccount/sl-agent", "ServiceAccount/sl-configurator",
		}},
		{name: "credentials and TLS", valuesFile: "testdata/auth-tls.yaml", want: []string{
			"ClusterRole/sl-agent", "ClusterRoleBinding/sl-agent", "ConfigMap/sl-agent", "DaemonSet/sl-agent",
			"Deployment/sl-configurator", "Deployment/sl-reaper", "Deployment/sl-rollout-coordinator",
			"PodDisruptionBudget/sl-configurator", "PodDisruptionBudget/sl-reaper", "PodDisruptionBudget/sl-rollout-coordinator",
			"ServiceAccount/sl-agent",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs, rel := render(t, tt.valuesFile)
			if got := objs.keys(); !slices.Equal(got, tt.want) {
				t.Errorf("objects:\n got %v\nwant %v", got, tt.want)
			}
			if strings.Contains(rel.Manifest, "privileged: true") {
				t.Error("a container is privileged")
			}
			if !strings.Contains(rel.Info.Notes, "sluice") {
				t.Errorf("NOTES.txt not rendered: %q", rel.Info.Notes)
			}
			for _, key := range objs.keys() {
				if spec, ok := podSpec(objs[key]); ok {
					checkPodBasics(t, key, spec)
				}
			}
		})
	}
}

// podSpec is the pod template of a Deployment or DaemonSet.
func podSpec(obj any) (corev1.PodSpec, bool) {
	switch o := obj.(type) {
	case *appsv1.Deployment:
		return o.Spec.Template.Spec, true
	case *appsv1.DaemonSet:
		return o.Spec.Template.Spec, true
	}
	return corev1.PodSpec{}, false
}

// checkPodBasics checks what every sluice pod has: --http-addr on the port
// named http, liveness /healthz and readiness /readyz on it, NATS in the
// environment, a read-only root and no privilege escalation.
func checkPodBasics(t *testing.T, key string, spec corev1.PodSpec) {
	t.Helper()
	for _, c := range spec.Containers {
		var port int32
		for _, p := range c.Ports {
			if p.Name == "http" {
				port = p.ContainerPort
			}
		}
		if port == 0 {
			t.Errorf("%s: container %s has no port named http", key, c.Name)
		}
		if !slices.Contains(c.Args, "--http-addr=:"+strconv.Itoa(int(port))) {
			t.Errorf("%s: args %v do not serve --http-addr on port %d", key, c.Args, port)
		}
		probes := []struct {
			name  string
			probe *corev1.Probe
			path  string
		}{{"liveness", c.LivenessProbe, "/healthz"}, {"readiness", c.ReadinessProbe, "/readyz"}}
		for _, p := range probes {
			if p.probe == nil || p.probe.HTTPGet == nil || p.probe.HTTPGet.Path != p.path || p.probe.HTTPGet.Port.String() != "http" {
				t.Errorf("%s: %s probe %+v, want GET %s on port http", key, p.name, p.probe, p.path)
			}
		}
		env := envOf(c)
		if env["SLUICE_NATS_URL"] == "" || env["SLUICE_REPLICAS"] == "" {
			t.Errorf("%s: env %v lacks SLUICE_NATS_URL or SLUICE_REPLICAS", key, env)
		}
		// Agents beat for the coordinator's node lease from their first beat.
		if env["SLUICE_NODE_LEASE"] != "3m" {
			t.Errorf("%s: SLUICE_NODE_LEASE %q, want the coordinator's node lease 3m", key, env["SLUICE_NODE_LEASE"])
		}
		sc := c.SecurityContext
		if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
			sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
			sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
			t.Errorf("%s: container %s security context %+v: want a read-only root, no privilege escalation, every capability dropped", key, c.Name, sc)
		}
	}
}

func envOf(c corev1.Container) map[string]string {
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			env[e.Name] = "fieldRef:" + e.ValueFrom.FieldRef.FieldPath
		}
	}
	return env
}

func TestChart_Defaults(t *testing.T) {
	objs, rel := render(t, "")

	for name, replicas := range map[string]int32{"configurator": 1, "rollout-coordinator": 2, "reaper": 1} {
		d := get[*appsv1.Deployment](t, objs, "Deployment/sl-"+name)
		if d.Spec.Replicas == nil || *d.Spec.Replicas != replicas {
			t.Errorf("%s: replicas %v, want %d", name, d.Spec.Replicas, replicas)
		}
		spec := d.Spec.Template.Spec
		if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
			t.Errorf("%s mounts a ServiceAccount token; it never talks to the API server", name)
		}
		if sc := spec.SecurityContext; sc == nil || sc.RunAsUser == nil || *sc.RunAsUser != 65532 || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
			t.Errorf("%s: pod security context %+v, want non-root 65532", name, sc)
		}
		if img := spec.Containers[0].Image; img != "sluice/sluice-"+name+":dev" {
			t.Errorf("%s: image %s", name, img)
		}
		pdb := get[*policyv1.PodDisruptionBudget](t, objs, "PodDisruptionBudget/sl-"+name)
		if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 ||
			pdb.Spec.Selector.MatchLabels["app.kubernetes.io/component"] != name {
			t.Errorf("%s: PDB %+v, want maxUnavailable 1 selecting it", name, pdb.Spec)
		}
	}

	coord := get[*appsv1.Deployment](t, objs, "Deployment/sl-rollout-coordinator")
	if args := coord.Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, "--leader-lease=2s") || !slices.Contains(args, "--node-lease=3m") {
		t.Errorf("coordinator args %v", coord.Spec.Template.Spec.Containers[0].Args)
	}
	aff := coord.Spec.Template.Spec.Affinity
	if aff == nil || aff.PodAntiAffinity == nil || len(aff.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) != 1 {
		t.Fatalf("coordinator affinity %+v, want a preferred pod anti-affinity", aff)
	}
	term := aff.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm
	if term.TopologyKey != "kubernetes.io/hostname" || term.LabelSelector.MatchLabels["app.kubernetes.io/component"] != "rollout-coordinator" {
		t.Errorf("coordinator anti-affinity term %+v", term)
	}

	ds := get[*appsv1.DaemonSet](t, objs, "DaemonSet/sl-agent")
	spec := ds.Spec.Template.Spec
	if spec.HostNetwork || spec.DNSPolicy != "" {
		t.Errorf("agent hostNetwork %v, dnsPolicy %q: want neither by default", spec.HostNetwork, spec.DNSPolicy)
	}
	if spec.ServiceAccountName != "sl-agent" {
		t.Errorf("agent ServiceAccount %q", spec.ServiceAccountName)
	}
	if mu := ds.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable; mu == nil || mu.IntValue() != 1 {
		t.Errorf("agent maxUnavailable %v, want 1", mu)
	}
	agent := spec.Containers[0]
	if sc := agent.SecurityContext; sc.RunAsUser == nil || *sc.RunAsUser != 65532 || sc.Capabilities.Add != nil {
		t.Errorf("agent security context %+v: want 65532 and no capabilities", sc)
	}
	if len(spec.InitContainers) != 1 || spec.InitContainers[0].Name != "state-dir-owner" ||
		!slices.Equal(spec.InitContainers[0].SecurityContext.Capabilities.Add, []corev1.Capability{"CHOWN"}) {
		t.Errorf("agent init containers %+v: want state-dir-owner with CHOWN only", spec.InitContainers)
	}
	wantArgs := []string{"--node=$(NODE_NAME)", "--kube-node-labels", "--state-dir=/var/lib/sluice-agent", "--config=/etc/sluice-agent/config.yaml", "--http-addr=:9469", "--log-level=info"}
	if !slices.Equal(agent.Args, wantArgs) {
		t.Errorf("agent args\n got %v\nwant %v", agent.Args, wantArgs)
	}
	if env := envOf(agent); env["NODE_NAME"] != "fieldRef:spec.nodeName" {
		t.Errorf("NODE_NAME = %q, want the downward API's spec.nodeName", env["NODE_NAME"])
	}
	if hp := volume(t, spec, "state").HostPath; hp == nil || hp.Path != "/var/lib/sluice-agent" {
		t.Errorf("state volume %+v, want hostPath /var/lib/sluice-agent", hp)
	}

	cm := get[*corev1.ConfigMap](t, objs, "ConfigMap/sl-agent")
	if got, want := strings.TrimSpace(cm.Data["config.yaml"]), "applier:\n  kind: file"; got != want {
		t.Errorf("agent config.yaml = %q, want %q", got, want)
	}
	if ds.Spec.Template.Annotations["checksum/config"] == "" {
		t.Error("agent pods carry no checksum of their config: a config change would not restart them")
	}

	role := get[*rbacv1.ClusterRole](t, objs, "ClusterRole/sl-agent")
	wantRules := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}}}
	if fmt.Sprint(role.Rules) != fmt.Sprint(wantRules) {
		t.Errorf("agent ClusterRole rules %+v, want only get/list/watch on nodes", role.Rules)
	}
	binding := get[*rbacv1.ClusterRoleBinding](t, objs, "ClusterRoleBinding/sl-agent")
	if binding.RoleRef.Name != "sl-agent" || len(binding.Subjects) != 1 ||
		binding.Subjects[0] != (rbacv1.Subject{Kind: "ServiceAccount", Name: "sl-agent", Namespace: namespace}) {
		t.Errorf("agent binding %+v", binding)
	}
	if strings.Contains(rel.Info.Notes, "WARNING") {
		t.Errorf("defaults warn:\n%s", rel.Info.Notes)
	}
}

func volume(t *testing.T, spec corev1.PodSpec, name string) corev1.Volume {
	t.Helper()
	for _, v := range spec.Volumes {
		if v.Name == name {
			return v
		}
	}
	t.Fatalf("no volume %s in %+v", name, spec.Volumes)
	return corev1.Volume{}
}

func TestChart_AgentWithNetAdmin(t *testing.T) {
	objs, rel := render(t, "testdata/agent-netadmin.yaml")
	ds := get[*appsv1.DaemonSet](t, objs, "DaemonSet/sl-agent")
	spec := ds.Spec.Template.Spec
	if !spec.HostNetwork || spec.DNSPolicy != corev1.DNSClusterFirstWithHostNet {
		t.Errorf("hostNetwork %v, dnsPolicy %q: want true, ClusterFirstWithHostNet", spec.HostNetwork, spec.DNSPolicy)
	}
	if spec.PriorityClassName != "system-node-critical" {
		t.Errorf("priorityClassName %q", spec.PriorityClassName)
	}
	if mu := ds.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable; mu == nil || mu.String() != "10%" {
		t.Errorf("maxUnavailable %v, want 10%%", mu)
	}
	if len(spec.InitContainers) != 0 {
		t.Errorf("init containers %v: a root agent owns its state dir already", spec.InitContainers)
	}
	agent := spec.Containers[0]
	sc := agent.SecurityContext
	if sc.Privileged != nil && *sc.Privileged {
		t.Error("agent is privileged")
	}
	if sc.RunAsUser == nil || *sc.RunAsUser != 0 {
		t.Errorf("runAsUser %v, want 0 (runAsRoot)", sc.RunAsUser)
	}
	if !slices.Equal(sc.Capabilities.Add, []corev1.Capability{"NET_ADMIN", "NET_RAW"}) || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("capabilities %+v, want NET_ADMIN and NET_RAW added, ALL dropped", sc.Capabilities)
	}
	wantArgs := []string{"--node=$(NODE_NAME)", "--kube-node-labels", "--labels=rack=rack-1,zone=zone-a", "--state-dir=/var/lib/sluice-agent",
		"--config=/etc/sluice-agent/config.yaml", "--http-addr=:19469", "--log-level=info", "--check-tcp=127.0.0.1:4222"}
	if !slices.Equal(agent.Args, wantArgs) {
		t.Errorf("args\n got %v\nwant %v", agent.Args, wantArgs)
	}
	if env := envOf(agent); env["SLUICE_EXTRA"] != "1" {
		t.Errorf("extraEnv missing: %v", env)
	}
	if spec.NodeSelector["sluice.example.com/agent"] != "true" {
		t.Errorf("nodeSelector %v", spec.NodeSelector)
	}
	if v := volume(t, spec, "scripts"); v.ConfigMap == nil || v.ConfigMap.Name != "sluice-apply-scripts" {
		t.Errorf("extra volume %+v", v)
	}

	cm := get[*corev1.ConfigMap](t, objs, "ConfigMap/sl-agent")
	want := `applier:
  command: /opt/sluice/apply.sh
  kind: exec
  mode: file
  path: /var/lib/sluice-agent/desired.json
applierTimeout: 5m
checkDeadline: 90s
checkRetries: 2
checkTimeout: 5s
checks:
- name: gateway
  refusedIsReachable: true
  tcp: 10.0.0.1:179
- interface: lo
  name: uplink
- exec: ip route show table 10 | grep -q default
  name: mgmt-table
  retries: 0
  timeout: 3s
- expectStatus: 204
  http: http://127.0.0.1:8080/healthz
  name: api
validate: test -s "$SLUICE_CONFIG"
validateTimeout: 30s
`
	if got := strings.TrimSpace(cm.Data["config.yaml"]); got != strings.TrimSpace(want) {
		t.Errorf("config.yaml:\n%s\nwant:\n%s", got, want)
	}
	if strings.Contains(rel.Info.Notes, "WARNING") {
		t.Errorf("NOTES warn although the agent runs as root:\n%s", rel.Info.Notes)
	}
}

func TestChart_CapabilitiesWithoutRoot_NotesWarn(t *testing.T) {
	f := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(f, []byte("agent:\n  capabilities: [NET_ADMIN]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, rel := render(t, f)
	if !strings.Contains(rel.Info.Notes, "WARNING: agent.capabilities (NET_ADMIN)") {
		t.Errorf("NOTES do not warn that a non-root agent gets no capabilities:\n%s", rel.Info.Notes)
	}
}

func TestChart_ServicesScaled(t *testing.T) {
	objs, _ := render(t, "testdata/services-scaled.yaml")
	coord := get[*appsv1.Deployment](t, objs, "Deployment/sl-rollout-coordinator")
	spec := coord.Spec.Template.Spec
	if *coord.Spec.Replicas != 3 {
		t.Errorf("coordinator replicas %d, want 3", *coord.Spec.Replicas)
	}
	aff := spec.Affinity
	if aff == nil || aff.PodAntiAffinity == nil || len(aff.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) != 1 ||
		aff.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution[0].TopologyKey != "topology.kubernetes.io/zone" {
		t.Errorf("coordinator affinity %+v, want a required anti-affinity over zones", aff)
	}
	c := spec.Containers[0]
	wantArgs := []string{"--http-addr=:8081", "--log-level=debug", "--leader-lease=15s", "--node-lease=3m", "--rollout-retention=200"}
	if !slices.Equal(c.Args, wantArgs) {
		t.Errorf("coordinator args\n got %v\nwant %v", c.Args, wantArgs)
	}
	if c.Image != "registry.example.com/net/sluice/sluice-rollout-coordinator:v1.2.3" || c.ImagePullPolicy != corev1.PullAlways {
		t.Errorf("image %s (%s)", c.Image, c.ImagePullPolicy)
	}
	if len(spec.ImagePullSecrets) != 1 || spec.ImagePullSecrets[0].Name != "regcred" {
		t.Errorf("imagePullSecrets %v", spec.ImagePullSecrets)
	}
	if len(spec.Tolerations) != 1 || spec.NodeSelector["node-role.kubernetes.io/control-plane"] != "" {
		t.Errorf("tolerations %v, nodeSelector %v", spec.Tolerations, spec.NodeSelector)
	}
	if _, ok := coord.Spec.Template.Annotations["prometheus.io/scrape"]; ok {
		t.Error("scrape annotations although metrics.annotations is false")
	}
	if env := envOf(c); env["SLUICE_NATS_URL"] != "nats://nats-0.nats:4222,nats://nats-1.nats:4222,nats://nats-2.nats:4222" || env["SLUICE_REPLICAS"] != "3" {
		t.Errorf("env %v", env)
	}
	if pdb := get[*policyv1.PodDisruptionBudget](t, objs, "PodDisruptionBudget/sl-rollout-coordinator"); pdb.Spec.MaxUnavailable.String() != "34%" {
		t.Errorf("coordinator PDB maxUnavailable %v, want 34%%", pdb.Spec.MaxUnavailable)
	}

	cfg := get[*appsv1.Deployment](t, objs, "Deployment/sl-configurator").Spec.Template.Spec
	if cfg.Affinity == nil || cfg.Affinity.NodeAffinity == nil || cfg.Affinity.PodAntiAffinity != nil {
		t.Errorf("configurator affinity %+v, want the values' node affinity only", cfg.Affinity)
	}
	if cfg.PriorityClassName != "sluice-control-plane" || envOf(cfg.Containers[0])["GOMEMLIMIT"] != "200MiB" ||
		!slices.Contains(cfg.Containers[0].Args, "--registry-fetch-timeout=10s") {
		t.Errorf("configurator priority %q, env %v, args %v", cfg.PriorityClassName, envOf(cfg.Containers[0]), cfg.Containers[0].Args)
	}
	reaper := get[*appsv1.Deployment](t, objs, "Deployment/sl-reaper").Spec.Template.Spec.Containers[0]
	if mem := reaper.Resources.Limits.Memory().String(); mem != "1Gi" {
		t.Errorf("reaper memory limit %s, want 1Gi", mem)
	}
}

// Every file in testdata/invalid breaks values.schema.json; its first line
// says what the error must name ("# want: …").
func TestChart_SchemaRefusesBadValues(t *testing.T) {
	eachRefused(t, "testdata/invalid", "values.schema.json", func(t *testing.T, err error, want string) {
		if !strings.Contains(err.Error(), "values don't meet the specifications of the schema") || !strings.Contains(err.Error(), want) {
			t.Errorf("error %q: want a schema error naming %q", err, want)
		}
	})
}

// eachRefused installs every values file in dir, each in a subtest, and
// hands check the error refusing it and the message wanted, which the
// file's first line gives ("# want: …"); a file that renders fails, saying
// it wanted refuser to refuse it.
func eachRefused(t *testing.T, dir, refuser string, check func(t *testing.T, err error, want string)) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no values files in %s: %v", dir, err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			first, _, _ := strings.Cut(string(b), "\n")
			want, ok := strings.CutPrefix(first, "# want: ")
			if !ok {
				t.Fatalf("%s: first line %q is not \"# want: …\"", f, first)
			}
			_, err = install(f)
			if err == nil {
				t.Fatalf("rendered; want %s to refuse it", refuser)
			}
			t.Logf("refused: %v", err)
			check(t, err, want)
		})
	}
}
