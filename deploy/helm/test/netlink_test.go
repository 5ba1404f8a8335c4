package charttest

import (
	"maps"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// netlinkBase is what every netlink values file written here needs to
// pass the templates: the node's network namespace, root, NET_ADMIN and
// NET_RAW.
const netlinkBase = "agent:\n  hostNetwork: true\n  runAsRoot: true\n  capabilities: [NET_ADMIN, NET_RAW]\n  applier: {kind: netlink}\n"

func TestChart_AgentWithNetlinkApplier(t *testing.T) {
	objs, rel := render(t, "testdata/agent-netlink.yaml")
	ds := get[*appsv1.DaemonSet](t, objs, "DaemonSet/sl-agent")
	spec := ds.Spec.Template.Spec
	if !spec.HostNetwork || spec.DNSPolicy != corev1.DNSClusterFirstWithHostNet {
		t.Errorf("hostNetwork %v, dnsPolicy %q: want true, ClusterFirstWithHostNet", spec.HostNetwork, spec.DNSPolicy)
	}
	if len(spec.InitContainers) != 0 {
		t.Errorf("init containers %v: a root agent owns its state dir already", spec.InitContainers)
	}
	agent := spec.Containers[0]
	sc := agent.SecurityContext
	if sc.RunAsUser == nil || *sc.RunAsUser != 0 || sc.RunAsNonRoot == nil || *sc.RunAsNonRoot {
		t.Errorf("runAsUser %v, runAsNonRoot %v: want root", sc.RunAsUser, sc.RunAsNonRoot)
	}
	if sc.Privileged != nil && *sc.Privileged {
		t.Error("agent is privileged")
	}
	if !slices.Equal(sc.Capabilities.Add, []corev1.Capability{"NET_ADMIN", "NET_RAW"}) || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("capabilities %+v, want NET_ADMIN and NET_RAW added, ALL dropped", sc.Capabilities)
	}
	wantArgs := []string{"--node=$(NODE_NAME)", "--kube-node-labels", "--state-dir=/var/lib/sluice-agent", "--config=/etc/sluice-agent/config.yaml",
		"--netlink-file=/etc/sluice/netlink.yaml", "--http-addr=:19469", "--log-level=info"}
	if !slices.Equal(agent.Args, wantArgs) {
		t.Errorf("args\n got %v\nwant %v", agent.Args, wantArgs)
	}

	// The node's own settings: its file, read-only, type File (no agent
	// without it), at the path --netlink-file names.
	hp := volume(t, spec, "netlink-host").HostPath
	if hp == nil || hp.Path != "/etc/sluice/netlink.yaml" || hp.Type == nil || *hp.Type != corev1.HostPathFile {
		t.Errorf("netlink-host volume %+v, want hostPath /etc/sluice/netlink.yaml of type File", hp)
	}
	if got, want := mountedFiles(t, "DaemonSet/sl-agent", spec, agent), map[string]string{"/etc/sluice/netlink.yaml": "hostPath /etc/sluice/netlink.yaml"}; !maps.Equal(got, want) {
		t.Errorf("files from the node %v, want %v", got, want)
	}
	// The routing-daemon document's directory: the node's, at the same
	// path, writable.
	if hp := volume(t, spec, "routing-daemon").HostPath; hp == nil || hp.Path != "/run/sluice" || hp.Type == nil || *hp.Type != corev1.HostPathDirectoryOrCreate {
		t.Errorf("routing-daemon volume %+v, want hostPath /run/sluice, DirectoryOrCreate", hp)
	}
	if m := mount(t, agent, "routing-daemon"); m.MountPath != "/run/sluice" || m.ReadOnly {
		t.Errorf("routing-daemon mount %+v, want /run/sluice, writable", m)
	}

	cm := get[*corev1.ConfigMap](t, objs, "ConfigMap/sl-agent")
	want := `applier:
  kind: netlink
checkRetries: 1
checks:
- uplink: eth1
- gateway:
    targets:
      "100":
      - 10.100.0.100
- gateway: {}
  name: gateways
- peer: 10.0.0.5
  vrf: tenant-a
- peer: tcp://10.0.0.6:179
netlink:
  anycastMAC: 02:53:4c:00:00:01
  floodPeers:
  - 192.0.2.11
  - 192.0.2.12
  - 192.0.2.13
  routingDaemonFile: /run/sluice/routing.json
  tableOffset: 1000
  uplink: eth1
  vrfTableBase: 20000
  vrfs: "off"
  vxlanPort: 4789
`
	if got := strings.TrimSpace(cm.Data["config.yaml"]); got != strings.TrimSpace(want) {
		t.Errorf("config.yaml:\n%s\nwant:\n%s", got, want)
	}

	for _, want := range []string{
		"Agent: one per node (netlink applier, 5 check(s), host network, root, capabilities NET_ADMIN,NET_RAW)",
		"netlink applier: each agent configures its node's own network (vrfs off: no VRF devices, no isolation between tenants).",
		"shared host settings: anycastMAC, floodPeers, routingDaemonFile, tableOffset, uplink, vrfTableBase, vrfs, vxlanPort (agent.netlink, in the ConfigMap)",
		"each node's own: the file /etc/sluice/netlink.yaml on that node (--netlink-file)",
		"routing-daemon document: /run/sluice/routing.json on each node.",
	} {
		if !strings.Contains(rel.Info.Notes, want) {
			t.Errorf("NOTES lack %q:\n%s", want, rel.Info.Notes)
		}
	}
	if strings.Contains(rel.Info.Notes, "WARNING") {
		t.Errorf("NOTES warn:\n%s", rel.Info.Notes)
	}
}

func TestChart_NetlinkApplier_WithoutNodeFile_NoVolumeNoArg(t *testing.T) {
	// The source given by a flag, nothing shared: no netlink section, no
	// node file, no routing-daemon directory.
	objs, rel := render(t, writeValues(t, netlinkBase+"  extraArgs: [--uplink=eth2]\n"))
	spec := get[*appsv1.DaemonSet](t, objs, "DaemonSet/sl-agent").Spec.Template.Spec
	agent := spec.Containers[0]
	wantArgs := []string{"--node=$(NODE_NAME)", "--kube-node-labels", "--state-dir=/var/lib/sluice-agent", "--config=/etc/sluice-agent/config.yaml",
		"--http-addr=:9469", "--log-level=info", "--uplink=eth2"}
	if !slices.Equal(agent.Args, wantArgs) {
		t.Errorf("args\n got %v\nwant %v", agent.Args, wantArgs)
	}
	for _, v := range spec.Volumes {
		if v.Name == "netlink-host" || v.Name == "routing-daemon" {
			t.Errorf("volume %+v without agent.netlinkHostPath or a routingDaemonFile", v)
		}
	}
	if files := mountedFiles(t, "DaemonSet/sl-agent", spec, agent); len(files) != 0 {
		t.Errorf("files from the node %v, want none", files)
	}
	cm := get[*corev1.ConfigMap](t, objs, "ConfigMap/sl-agent")
	if got, want := strings.TrimSpace(cm.Data["config.yaml"]), "applier:\n  kind: netlink"; got != want {
		t.Errorf("config.yaml = %q, want %q (no netlink section when agent.netlink is empty)", got, want)
	}
	if !strings.Contains(rel.Info.Notes, "shared host settings: none") || strings.Contains(rel.Info.Notes, "each node's own") {
		t.Errorf("NOTES:\n%s", rel.Info.Notes)
	}
}

// The netlink values belong to the netlink applier: with another one
// nothing of them is rendered.
func TestChart_NetlinkValues_IgnoredByOtherAppliers(t *testing.T) {
	objs, _ := render(t, writeValues(t, "agent:\n  netlink: {uplink: eth1, routingDaemonFile: /run/sluice/routing.json}\n  netlinkHostPath: /etc/sluice/netlink.yaml\n"))
	spec := get[*appsv1.DaemonSet](t, objs, "DaemonSet/sl-agent").Spec.Template.Spec
	for _, a := range spec.Containers[0].Args {
		if strings.HasPrefix(a, "--netlink-file") {
			t.Errorf("arg %s with the file applier", a)
		}
	}
	for _, v := range spec.Volumes {
		if v.Name == "netlink-host" || v.Name == "routing-daemon" {
			t.Errorf("volume %s with the file applier", v.Name)
		}
	}
	cm := get[*corev1.ConfigMap](t, objs, "ConfigMap/sl-agent")
	if got, want := strings.TrimSpace(cm.Data["config.yaml"]), "applier:\n  kind: file"; got != want {
		t.Errorf("config.yaml = %q, want %q", got, want)
	}
}

// A per-node value in the shared settings is the same on every node: the
// chart renders it (a DaemonSet may run on one node) and NOTES warn.
func TestChart_NetlinkPerNodeValuesShared_NotesWarn(t *testing.T) {
	_, rel := render(t, writeValues(t, netlinkBase+"  netlink:\n    vtepAddress: 192.0.2.11\n    nodeAddresses: {100: 10.100.0.11/24}\n"))
	if !strings.Contains(rel.Info.Notes, "WARNING: agent.netlink sets vtepAddress and nodeAddresses, shared by every node") {
		t.Errorf("NOTES do not warn of per-node values shared by every node:\n%s", rel.Info.Notes)
	}
}

func mount(t *testing.T, c corev1.Container, name string) corev1.VolumeMount {
	t.Helper()
	for _, m := range c.VolumeMounts {
		if m.Name == name {
			return m
		}
	}
	t.Fatalf("no mount of %s in %+v", name, c.VolumeMounts)
	return corev1.VolumeMount{}
}
