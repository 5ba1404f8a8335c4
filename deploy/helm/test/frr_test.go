package charttest

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// With kind netlink,frr (testdata/agent-frr.yaml) the agent runs the
// image named, reaches the node's FRR through its /var/run/frr and
// /etc/frr (hostPath Directory, writable: frr-reload writes its work files
// and each pathspace's frr.conf), takes its router id from the node's
// address, and its config file has both sections and the FRR checks.
func TestChart_AgentWithNetlinkAndFRRAppliers(t *testing.T) {
	objs, rel := render(t, "testdata/agent-frr.yaml")
	ds := get[*appsv1.DaemonSet](t, objs, "DaemonSet/sl-agent")
	spec := ds.Spec.Template.Spec
	if !spec.HostNetwork {
		t.Error("hostNetwork false: the route checks read the node's kernel tables")
	}
	agent := spec.Containers[0]
	if agent.Image != "registry.example/sluice-agent-frr:1.2.3" {
		t.Errorf("image %q, want agent.image's", agent.Image)
	}
	wantArgs := []string{"--node=$(NODE_NAME)", "--kube-node-labels", "--state-dir=/var/lib/sluice-agent", "--config=/etc/sluice-agent/config.yaml",
		"--frr-router-id=$(HOST_IP)", "--http-addr=:19469", "--log-level=info"}
	if !slices.Equal(agent.Args, wantArgs) {
		t.Errorf("args\n got %v\nwant %v", agent.Args, wantArgs)
	}
	var hostIP *corev1.EnvVar
	for i, e := range agent.Env {
		if e.Name == "HOST_IP" {
			hostIP = &agent.Env[i]
		}
	}
	if hostIP == nil || hostIP.ValueFrom == nil || hostIP.ValueFrom.FieldRef == nil || hostIP.ValueFrom.FieldRef.FieldPath != "status.hostIP" {
		t.Errorf("env HOST_IP %+v, want the pod's status.hostIP", hostIP)
	}
	for name, path := range map[string]string{"frr-run": "/var/run/frr", "frr-conf": "/etc/frr"} {
		if hp := volume(t, spec, name).HostPath; hp == nil || hp.Path != path || hp.Type == nil || *hp.Type != corev1.HostPathDirectory {
			t.Errorf("%s volume %+v, want hostPath %s of type Directory", name, hp, path)
		}
		if m := mount(t, agent, name); m.MountPath != path || m.ReadOnly {
			t.Errorf("%s mount %+v, want %s, writable", name, m, path)
		}
	}

	cm := get[*corev1.ConfigMap](t, objs, "ConfigMap/sl-agent")
	want := `applier:
  kind: netlink,frr
checks:
- bgp:
    minPrefixes: 1
- route: 0.0.0.0/0
frr:
  asn: 65011
  base: /etc/frr/base.conf
  neighbors:
  - address: 192.0.2.254
    connectRetry: 1
    remoteAS: external
  - interface: eth2
    remoteAS: internal
  pathspace: leaf
  settle: 750ms
netlink:
  uplink: eth1
  vrfs: "off"
`
	if got := strings.TrimSpace(cm.Data["config.yaml"]); got != strings.TrimSpace(want) {
		t.Errorf("config.yaml:\n%s\nwant:\n%s", got, want)
	}
	for _, want := range []string{
		"Agent: one per node (netlink,frr applier, 2 check(s), host network, root, capabilities NET_ADMIN,NET_RAW)",
		"netlink applier: each agent configures its node's own network",
		"FRR applier: each agent reloads its node's FRR (pathspace leaf, base file /etc/frr/base.conf, router id the node's address) with image registry.example/sluice-agent-frr:1.2.3.",
	} {
		if !strings.Contains(rel.Info.Notes, want) {
			t.Errorf("NOTES lack %q:\n%s", want, rel.Info.Notes)
		}
	}
}

// kind frr alone: the frr section and the mounts, nothing of netlink's
// values (given or not); without frrRouterIdFromHostIP no HOST_IP and no
// --frr-router-id. The default applier gets nothing of FRR's.
func TestChart_FRRApplierAlone_AndFRRValuesIgnoredByOthers(t *testing.T) {
	frrOnly := "agent:\n  hostNetwork: true\n  runAsRoot: true\n  image: r/agent-frr:1\n  applier: {kind: frr}\n" +
		"  netlink: {uplink: eth1}\n  frr: {asn: 65011, routerId: 192.0.2.11, vrfs: \"off\"}\n"
	objs, _ := render(t, writeValues(t, frrOnly))
	spec := get[*appsv1.DaemonSet](t, objs, "DaemonSet/sl-agent").Spec.Template.Spec
	for _, a := range spec.Containers[0].Args {
		if strings.HasPrefix(a, "--frr-router-id") {
			t.Errorf("arg %s without frrRouterIdFromHostIP", a)
		}
	}
	for _, e := range spec.Containers[0].Env {
		if e.Name == "HOST_IP" {
			t.Error("env HOST_IP without frrRouterIdFromHostIP")
		}
	}
	volume(t, spec, "frr-run")
	volume(t, spec, "frr-conf")
	got := strings.TrimSpace(get[*corev1.ConfigMap](t, objs, "ConfigMap/sl-agent").Data["config.yaml"])
	if want := "applier:\n  kind: frr\nfrr:\n  asn: 65011\n  routerId: 192.0.2.11\n  vrfs: \"off\""; got != want {
		t.Errorf("config.yaml:\n%s\nwant:\n%s", got, want)
	}

	objs, _ = render(t, writeValues(t, "agent:\n  frr: {asn: 65011}\n  frrRouterIdFromHostIP: true\n"))
	spec = get[*appsv1.DaemonSet](t, objs, "DaemonSet/sl-agent").Spec.Template.Spec
	for _, v := range spec.Volumes {
		if strings.HasPrefix(v.Name, "frr-") {
			t.Errorf("volume %s with the file applier", v.Name)
		}
	}
	if slices.ContainsFunc(spec.Containers[0].Args, func(a string) bool { return strings.HasPrefix(a, "--frr") }) {
		t.Errorf("args %v: an FRR flag with the file applier", spec.Containers[0].Args)
	}
	if got := get[*corev1.ConfigMap](t, objs, "ConfigMap/sl-agent").Data["config.yaml"]; strings.Contains(got, "frr") {
		t.Errorf("config.yaml of the file applier has FRR's section:\n%s", got)
	}
}
