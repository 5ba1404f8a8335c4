package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"github.com/sluicehq/sluice/internal/testkit/hostnettest"
	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/agent"
	"github.com/sluicehq/sluice/services/agent/hostnet"
	"github.com/sluicehq/sluice/services/agent/netcheck"
)

// TestEndToEnd_NetlinkApplier_RollsOutAndRollsBackABrokenOverlay runs the
// whole system with three agents whose netlink appliers configure three
// network namespaces joined by a fabric, and whose built-in gateway check
// pings a reference endpoint across the overlay (a fourth namespace the
// test configures itself, as a router would be: VNI 10100, 10.100.0.100).
// A rollout of the network succeeds and the nodes reach each other across
// the overlay; a rollout that moves the network to another VNI breaks the
// overlay on the first node, whose gateway check fails: it restores its
// last-good, the rollout is rolled back with that node's fingerprint
// recorded invalid, and the overlay works again.
func TestEndToEnd_NetlinkApplier_RollsOutAndRollsBackABrokenOverlay(t *testing.T) {
	hostnettest.RequireNetAdmin(t)
	// With kernel VRFs the network's addresses are in VRF tenant-a: pings
	// go out of its device. Without (this machine kind's kernel), in the
	// main table; make test-kernel runs this test where VRFs exist.
	vrfs, vrfDev := hostnet.VRFsKernel, "vrf-tenant-a"
	if err := hostnet.ProbeVRF(); err != nil {
		if hostnettest.KernelVRFsRequired() {
			t.Fatalf("%s=required but the kernel has no VRFs: %v", hostnettest.EnvKernelVRFs, err)
		}
		t.Logf("VRFs off: %v", err)
		vrfs, vrfDev = hostnet.VRFsOff, ""
	}
	const nodes, vlan = 3, 100
	fabric := hostnettest.NewFabric(t, nodes+1)
	var peers []netip.Addr
	for _, fn := range fabric.Nodes {
		peers = append(peers, fn.VTEP)
	}
	addr := func(i int) netip.Prefix { return netip.MustParsePrefix(fmt.Sprintf("10.100.0.%d/24", 11+i)) }
	router := fabric.Nodes[nodes]
	routerAddr := netip.MustParsePrefix("10.100.0.100/24")
	network := func(vni uint32) []*sluicev1.Intent {
		return []*sluicev1.Intent{{Name: "tenant-a-100", Spec: &sluicev1.Intent_Layer2Network{Layer2Network: &sluicev1.Layer2Network{
			Vlan: vlan, Vni: vni, Mtu: 1450, AnycastGateways: []string{"10.100.0.1/24"}, Vrf: "tenant-a"}}}}
	}

	// The reference endpoint, on VNI 10100 for the whole test.
	ra, err := hostnet.NewAt(router.NS, hostnet.Host{Uplink: hostnettest.UplinkName, VTEPAddress: router.VTEP, FloodPeers: peers,
		VRFs: vrfs, NodeAddresses: map[uint32]netip.Prefix{vlan: routerAddr}})
	if err != nil {
		t.Fatal(err)
	}
	if err := ra.Apply(context.Background(), &sluicev1.DesiredConfig{Config: &sluicev1.NodeConfig{Intents: network(10100)}}); err != nil {
		t.Fatalf("configure the reference endpoint: %v", err)
	}

	index := func(node string) int {
		for i := range nodes {
			if nodeName(i) == node {
				return i
			}
		}
		t.Fatalf("no node %s", node)
		return -1
	}
	appliers := map[string]*hostnet.Applier{}
	wrap := func(node string, _ agent.Applier) agent.Applier {
		i := index(node)
		a, err := hostnet.NewAt(fabric.Nodes[i].NS, hostnet.Host{Uplink: hostnettest.UplinkName, VTEPAddress: fabric.Nodes[i].VTEP,
			FloodPeers: peers, VRFs: vrfs, NodeAddresses: map[uint32]netip.Prefix{vlan: addr(i)}})
		if err != nil {
			t.Fatal(err)
		}
		appliers[node] = a
		return a
	}
	gateway := func(node string) []agent.CheckSpec {
		ns := fabric.Nodes[index(node)].NS
		return []agent.CheckSpec{{Check: inNamespace{ns: ns, Check: netcheck.Gateway{Targets: map[uint32][]netip.Addr{vlan: {routerAddr.Addr()}}}},
			Timeout: 3 * time.Second, Retries: 1}}
	}

	env := natstest.Start(t, contract.DefaultSettings())
	s := startSystemWith(t, env, t.TempDir(), nodes, wrap, gateway)
	waitRegistered(t, env, nodes)

	// The network rolls out: every node reaches the endpoint and the others.
	ok := apply(t, env, network(10100), &sluicev1.Strategy{MaxParallel: "1"})
	if r := waitRolloutEnd(t, env, ok.GetGeneration(), time.Minute); r.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED {
		t.Fatalf("rollout of the network: %s (%s)", r.GetPhase(), r.GetReason())
	}
	for i := range nodes {
		j := (i + 1) % nodes
		if err := hostnettest.PingDev(fabric.Nodes[i].NS, vrfDev, addr(i).Addr(), addr(j).Addr(), 5*time.Second); err != nil {
			t.Fatalf("%s to %s across the overlay: %v", nodeName(i), nodeName(j), err)
		}
	}
	for i := range nodes {
		t.Logf("%s (namespace %s) after the rollout:\n%s", nodeName(i), fabric.Nodes[i].Name, describeOwned(t, appliers[nodeName(i)]))
	}
	// Idempotent: every agent applied once; the same config again writes nothing.
	for node, a := range appliers {
		if err := a.Apply(context.Background(), mustDesired(t, env, node)); err != nil || a.LastWrites() != 0 {
			t.Fatalf("%s: the same config again: %v, %d netlink writes; want none", node, err, a.LastWrites())
		}
	}

	t.Logf("every node reaches the next one's own address across the overlay; the same config again: 0 netlink writes")

	// Another VNI breaks the overlay on the first node it reaches.
	bad := apply(t, env, network(10200), &sluicev1.Strategy{MaxParallel: "1"})
	r := waitRolloutEnd(t, env, bad.GetGeneration(), time.Minute)
	if r.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_ROLLED_BACK {
		t.Fatalf("rollout to VNI 10200: %s (%s); want ROLLED_BACK", r.GetPhase(), r.GetReason())
	}
	_, _, invalid := stores(env)
	listed, err := invalid.List(context.Background(), ">")
	var all = listed[:0]
	for _, e := range listed {
		if !strings.HasPrefix(e.Key, "_") { // the bucket's fencing keys
			all = append(all, e)
		}
	}
	if err != nil || len(all) != 1 {
		for _, e := range all {
			t.Logf("%s: %v", e.Key, e.Value)
		}
		t.Fatalf("invalid fingerprints: %d, %v; want the broken node's one", len(all), err)
	}
	rec := all[0].Value
	if rec.GetCause() != "check-failed" || !strings.HasPrefix(rec.GetCheck(), "gateway") || !strings.Contains(rec.GetOutput(), routerAddr.Addr().String()) {
		t.Fatalf("recorded %s: cause %q, check %q, output %q; want the gateway check failing to reach %s",
			rec.GetFingerprint(), rec.GetCause(), rec.GetCheck(), rec.GetOutput(), routerAddr.Addr())
	}
	t.Logf("recorded invalid: %.12s on %s: %s: %s", rec.GetFingerprint(), rec.GetNode(), rec.GetCheck(), rec.GetOutput())
	t.Logf("rollout %s: %s: %s", r.GetId(), r.GetPhase(), r.GetReason())
	assertInvariants(t, s, r)
	// The overlay works again, on every node.
	for i := range nodes {
		if err := hostnettest.PingDev(fabric.Nodes[i].NS, vrfDev, addr(i).Addr(), routerAddr.Addr(), 5*time.Second); err != nil {
			t.Fatalf("%s to the endpoint after the rollback: %v", nodeName(i), err)
		}
	}
}

// mustDesired is node's desired config.
func mustDesired(t *testing.T, env *natstest.Env, node string) *sluicev1.DesiredConfig {
	t.Helper()
	desired, _, _ := stores(env)
	e, err := desired.Get(context.Background(), contract.DesiredKey(node))
	if err != nil {
		t.Fatal(err)
	}
	return e.Value
}

// inNamespace runs a check inside a node's network namespace, as the agent
// on that node would (all agents of this test share one process).
type inNamespace struct {
	ns netns.NsHandle
	agent.Check
}

func (c inNamespace) Run(ctx context.Context, env agent.CheckEnv) (out string, err error) {
	if rerr := hostnettest.RunIn(c.ns, func() error { out, err = c.Check.Run(ctx, env); return nil }); rerr != nil {
		return "", rerr
	}
	return out, err
}

// describeOwned lists the links a's namespace has that sluice owns, one
// per line, as `ip -d link` and `ip addr` would show what matters.
func describeOwned(t *testing.T, a *hostnet.Applier) string {
	t.Helper()
	owned, err := a.Owned()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, l := range owned.Links {
		fmt.Fprintf(&b, "  %-8s %-7s", l.Name, l.Kind)
		if l.VNI != 0 {
			fmt.Fprintf(&b, " vni %d port %d local %s", l.VNI, l.Port, l.Local)
		}
		if l.Master != "" {
			fmt.Fprintf(&b, " master %s", l.Master)
		}
		if l.HardwareAddr != "" {
			fmt.Fprintf(&b, " mac %s", l.HardwareAddr)
		}
		fmt.Fprintf(&b, " mtu %d", l.MTU)
		for _, ad := range l.Addrs {
			fmt.Fprintf(&b, " %s", ad.Prefix)
		}
		for _, f := range l.FDB {
			fmt.Fprintf(&b, " flood→%v", f)
		}
		b.WriteString("\n")
	}
	return b.String()
}
