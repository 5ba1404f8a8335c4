package frr_test

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/vishvananda/netlink"

	"github.com/sluicehq/sluice/internal/testkit/frrtest"
	"github.com/sluicehq/sluice/internal/testkit/hostnettest"
	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/agent"
	"github.com/sluicehq/sluice/services/agent/frr"
	"github.com/sluicehq/sluice/services/agent/hostnet"
)

// TestAgent_KernelVRFs_ImportVRFLeakFollowsTheRouteMap is the FRR
// applier's layout with kernel VRFs, which only a kernel with
// CONFIG_NET_VRF runs (make test-kernel's guest; on a host without it the
// test skips, saying so). An agent with netlink then FRR as one applier
// runs on node n2 of a two-node fabric; n1, a real FRR peer over eBGP in
// the default VRF, announces 203.0.113.0/24 and 198.51.100.0/24.
//
//  1. A config with a layer2 network in VRF t and a VRF route importing
//     both prefixes: netlink makes the VRF device vrf-t on its table, FRR
//     gets `router bgp 65002 vrf vrf-t` with `import vrf default` through
//     the route map, and the route checks PREFIX%vrf-t see both leaked
//     prefixes in FRR's table of vrf-t and in the kernel's table of the
//     device: the node is Provisioned.
//  2. The same VRF route importing only 198.51.100.0/24: the changed
//     route map must take 203.0.113.0/24 out of vrf-t before the checks
//     run, so its check fails, the agent restores last-good and the
//     prefix is back in vrf-t, in FRR and in the kernel.
//
// bgpd re-runs an `import vrf route-map` only when its route-map delay
// timer fires (no `clear bgp … soft` does it), 5 s after a change; the
// applier fires it itself after each reload (refresh.go). Under qemu's
// TCG a reload can take longer than 5 s, so there the timer may fire on
// its own before the checks: TestRefreshCommands pins the applier's part.
func TestAgent_KernelVRFs_ImportVRFLeakFollowsTheRouteMap(t *testing.T) {
	frrtest.Require(t)
	hostnettest.RequireNetAdmin(t)
	hostnettest.RequireKernelVRFs(t, hostnet.ProbeVRF())
	fab := hostnettest.NewFabric(t, 2)
	frrtest.Start(t, fab.Nodes[0].Name, frrtest.Options{Config: n1Config})
	ns2 := fab.Nodes[1].NS

	netl, err := hostnet.NewAt(ns2, hostnet.Host{Uplink: hostnettest.UplinkName, VTEPAddress: fab.Nodes[1].VTEP, VRFs: hostnet.VRFsKernel})
	if err != nil {
		t.Fatal(err)
	}
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	settings := node2()
	settings.VRFs = hostnet.VRFsKernel
	n2 := frrtest.Start(t, fab.Nodes[1].Name, frrtest.Options{})
	fa, err := frr.NewApplier(frr.ApplierConfig{FRR: n2.Instance, Settings: settings, Hostname: host, Dir: t.TempDir(), Settle: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	const node, tenant = "n2", "t"
	vrfDev := hostnet.VRFName(tenant)
	kept, filtered := "198.51.100.0/24", "203.0.113.0/24"
	good := desiredOf(node, "leak", layer2(100), vrfRoute("leak", tenant, 10, "", items(filtered, kept), nil))
	file, err := fa.File(good.GetConfig())
	if err != nil {
		t.Fatal(err)
	}
	// Under qemu's TCG every FRR command is 5-10× slower than on a host:
	// the bounds leave room for that.
	route := func(p string) agent.CheckSpec {
		c, err := frr.ParseRoute(p+"%"+vrfDev, n2.Instance)
		if err != nil {
			t.Fatal(err)
		}
		return agent.CheckSpec{Check: inNamespace{ns2, c}, Timeout: 10 * time.Second}
	}

	env := natstest.Start(t, contract.DefaultSettings())
	configs := store.New(env.Buckets.NodeConfigs, func() *sluicev1.DesiredConfig { return &sluicev1.DesiredConfig{} })
	statuses := store.New(env.Buckets.Status, func() *sluicev1.NodeStatus { return &sluicev1.NodeStatus{} })
	a, err := agent.New(agent.Config{
		Conn: env.Conn, Settings: env.Settings, Node: node, StateDir: t.TempDir(),
		Log:     zerolog.New(zerolog.NewTestWriter(t)).With().Timestamp().Logger().Level(zerolog.InfoLevel),
		Applier: agent.Appliers{{Name: "netlink", Applier: netl}, {Name: "frr", Applier: fa}},
		Checks: []agent.CheckSpec{
			{Check: frr.BGP{FRR: n2.Instance, MinPrefixes: 2}, Timeout: time.Minute},
			route(filtered), route(kept),
		},
		CheckDeadline: 3 * time.Minute, ApplierTimeout: 2 * time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent: %v", err)
		}
	})
	write := func(d *sluicev1.DesiredConfig) {
		t.Helper()
		cur, err := configs.Get(context.Background(), contract.DesiredKey(node))
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			t.Fatal(err)
		}
		if _, err := configs.Update(context.Background(), contract.DesiredKey(node), d, cur.Revision); err != nil {
			t.Fatal(err)
		}
	}
	// settled waits for the agent's verdict on d, Provisioned or Invalid.
	settled := func(d *sluicev1.DesiredConfig) *sluicev1.NodeStatus {
		t.Helper()
		var st *sluicev1.NodeStatus
		for deadline := time.Now().Add(4 * time.Minute); ; {
			e, err := statuses.Get(context.Background(), node)
			st = e.Value
			ph := st.GetPhase()
			if err == nil && st.GetFingerprint() == d.GetFingerprint() &&
				(ph == sluicev1.NodePhase_NODE_PHASE_PROVISIONED || ph == sluicev1.NodePhase_NODE_PHASE_INVALID) {
				return st
			}
			if time.Now().After(deadline) {
				t.Fatalf("no verdict on %s within 4m; the status is %v", d.GetRevision(), st)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	table := func() string {
		t.Helper()
		link, err := hostnettest.Handle(t, ns2).LinkByName(vrfDev)
		if err != nil {
			t.Fatalf("VRF device %s: %v", vrfDev, err)
		}
		v, ok := link.(*netlink.Vrf)
		if !ok {
			t.Fatalf("device %s is a %s, not a VRF", vrfDev, link.Type())
		}
		return strconv.FormatUint(uint64(v.Table), 10)
	}
	leaked := func(prefix, out string) {
		t.Helper()
		for _, want := range []string{
			"FRR: " + prefix + " bgp selected installed (vrf " + vrfDev + ", table " + table(),
			"kernel table " + table() + " (vrf " + vrfDev + "): " + prefix + " via 192.0.2.1 dev " + hostnettest.UplinkName + " proto bgp",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("route %s%%%s: output lacks %q:\n%s", prefix, vrfDev, want, out)
			}
		}
	}

	start := time.Now()
	write(good)
	st := settled(good)
	if st.GetPhase() != sluicev1.NodePhase_NODE_PHASE_PROVISIONED {
		t.Fatalf("1. the leaking config is %s, want Provisioned: check %q, %s\n%s", st.GetPhase(), st.GetFailedCheck(), st.GetMessage(), st.GetCheckOutput())
	}
	t.Logf("1. applied and checked (BGP, both prefixes leaked into %s) %s after the write", vrfDev, time.Since(start).Round(time.Millisecond))
	for _, p := range []string{filtered, kept} {
		out, err, _ := runCheck(t, ns2, route(p).Check.(inNamespace).Check, 15*time.Second)
		if err != nil {
			t.Fatalf("route %s%%%s after the apply: %v\n%s", p, vrfDev, err, out)
		}
		leaked(p, out)
		t.Logf("route %s%%%s:\n%s", p, vrfDev, out)
	}
	if !strings.Contains(file, "router bgp 65002 vrf "+vrfDev+"\n") || !strings.Contains(file, "  import vrf route-map sluice_t_import_v4\n  import vrf default\n") {
		t.Errorf("the applied file lacks vrf %s's instance importing from the default VRF:\n%s", vrfDev, file)
	}
	// The kernel layout is FRR's own form with real VRFs too: after the
	// reload frr-reload sees nothing of sluice's block to change.
	if d, err := n2.Diff(ctxT(t, time.Minute), confFileRaw(t, file)); err != nil || !d.Empty() {
		t.Errorf("after the apply, frr-reload --test of the applied file: %v, %v; want no change", d, err)
	}

	filter := desiredOf(node, "filter", layer2(100), vrfRoute("leak", tenant, 10, "", items(kept), nil))
	start = time.Now()
	write(filter)
	st = settled(filter)
	t.Logf("2. %s after %s: check %q, message %q\noutput:\n%s", st.GetPhase(), time.Since(start).Round(time.Millisecond), st.GetFailedCheck(), st.GetMessage(), st.GetCheckOutput())
	if st.GetPhase() != sluicev1.NodePhase_NODE_PHASE_INVALID {
		t.Fatalf("2. the config whose route map filters %s out of %s is %s, want Invalid: the leak did not follow the route map before the checks", filtered, vrfDev, st.GetPhase())
	}
	if want := "route: " + filtered + "%" + vrfDev; st.GetFailedCheck() != want {
		t.Errorf("failed check %q, want %q", st.GetFailedCheck(), want)
	}
	for _, want := range []string{
		filtered + " is not in FRR's routing table of vrf " + vrfDev,
		filtered + " is not in the kernel's table " + table() + " (vrf " + vrfDev + ")",
	} {
		if !strings.Contains(st.GetCheckOutput(), want) {
			t.Errorf("check output lacks %q", want)
		}
	}
	if want := "restored last-good " + good.GetFingerprint()[:12] + " (checks pass)"; !strings.Contains(st.GetMessage(), want) {
		t.Errorf("message lacks %q", want)
	}
	if st.GetAppliedFingerprint() != good.GetFingerprint() {
		t.Errorf("applied fingerprint %s, want last-good's %s", st.GetAppliedFingerprint(), good.GetFingerprint())
	}
	if fa.Reloads() != 3 {
		t.Errorf("reloads: %d, want 3 (the leak, the filter, the leak again)", fa.Reloads())
	}
	// Restored: the prefix is leaked into the VRF again, in FRR and the kernel.
	out, err, _ := runCheck(t, ns2, route(filtered).Check.(inNamespace).Check, 15*time.Second)
	if err != nil {
		t.Fatalf("route %s%%%s after the restore: %v\n%s", filtered, vrfDev, err, out)
	}
	leaked(filtered, out)
}
