package frr_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"github.com/sluicehq/sluice/internal/testkit/frrtest"
	"github.com/sluicehq/sluice/internal/testkit/hostnettest"
	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
	fingerprint "github.com/sluicehq/sluice/pkg/render"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/agent"
	"github.com/sluicehq/sluice/services/agent/frr"
	"github.com/sluicehq/sluice/services/agent/hostnet"
)

// inNamespace runs a check inside a node's network namespace, as the
// agent on that node would (the agent of this test runs in the test's).
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

// node2 is the FRR settings of the node under the agent: n2 of
// frr_linux_test's fabric, peering with n1 (which announces 203.0.113.0/24
// and 198.51.100.0/24), without kernel VRFs (the host kernel has none).
func node2() frr.Settings {
	return frr.Settings{ASN: 65002, RouterID: netip.MustParseAddr("192.0.2.2"), VRFs: hostnet.VRFsOff,
		Neighbors: []frr.Neighbor{{Address: netip.MustParseAddr("192.0.2.1"), RemoteAS: "65001", ConnectRetry: 1}}}
}

// desiredOf is node's desired config of intents, named name.
func desiredOf(node, name string, intents ...*sluicev1.Intent) *sluicev1.DesiredConfig {
	nc := &sluicev1.NodeConfig{Intents: intents}
	return &sluicev1.DesiredConfig{Node: node, Revision: "rev-" + name, Rollout: "rollout-" + name, Fingerprint: fingerprint.Fingerprint(nc), Config: nc}
}

func layer2(vlan uint32) *sluicev1.Intent {
	return &sluicev1.Intent{Name: fmt.Sprintf("net-%d", vlan), Spec: &sluicev1.Intent_Layer2Network{Layer2Network: &sluicev1.Layer2Network{
		Vlan: vlan, Vni: 10000 + vlan, Mtu: 1450, AnycastGateways: []string{fmt.Sprintf("10.%d.0.1/24", vlan%250)}, Vrf: "t"}}}
}

// TestAgent_NetlinkAndFRR_AppliesRestoresAndRefusesAsOneOperation runs an
// agent whose applier is netlink then FRR (--applier netlink,frr) on node
// n2 of a two-node fabric, n1 a real FRR peer over eBGP announcing two
// prefixes, and walks the node-side story:
//
//  1. a config whose VRF route imports both prefixes is applied (links by
//     netlink, the route maps by one reload) and checked: BGP up, both
//     routes in FRR and in n2's kernel; the same config again reloads
//     nothing;
//  2. a config whose route map filters 203.0.113.0/24 (and moves the
//     layer2 network) fails --check-route 203.0.113.0/24; the agent
//     restores last-good through both appliers: the prefix is back in FRR
//     and the kernel, the links are last-good's, the node is Invalid;
//  3. a config FRR cannot take (a route map entry past 65535) is Invalid
//     naming the route and the field, and nothing is applied: no reload,
//     the links unchanged;
//  4. with n2's daemons stopped, a new config is Invalid as a node fault
//     (node_fault: FRR is not running), and nothing is applied: no
//     reload, the links unchanged.
func TestAgent_NetlinkAndFRR_AppliesRestoresAndRefusesAsOneOperation(t *testing.T) {
	frrtest.Require(t)
	hostnettest.RequireNetAdmin(t)
	fab := hostnettest.NewFabric(t, 2)
	frrtest.Start(t, fab.Nodes[0].Name, frrtest.Options{Config: n1Config})
	n2 := frrtest.Start(t, fab.Nodes[1].Name, frrtest.Options{})
	ns2 := fab.Nodes[1].NS

	netl, err := hostnet.NewAt(ns2, hostnet.Host{Uplink: hostnettest.UplinkName, VTEPAddress: fab.Nodes[1].VTEP, VRFs: hostnet.VRFsOff})
	if err != nil {
		t.Fatal(err)
	}
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	fa, err := frr.NewApplier(frr.ApplierConfig{FRR: n2.Instance, Settings: node2(), Hostname: host, Dir: t.TempDir(), Settle: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if warnings, err := fa.Preflight(ctxT(t, 10*time.Second)); err != nil || len(warnings) > 0 {
		t.Fatalf("preflight: %v, warnings %q", err, warnings)
	}
	kept, filtered := "198.51.100.0/24", "203.0.113.0/24"
	route := func(p string) agent.CheckSpec {
		c, err := frr.ParseRoute(p, n2.Instance)
		if err != nil {
			t.Fatal(err)
		}
		return agent.CheckSpec{Check: inNamespace{ns2, c}, Timeout: 8 * time.Second}
	}

	env := natstest.Start(t, contract.DefaultSettings())
	configs := store.New(env.Buckets.NodeConfigs, func() *sluicev1.DesiredConfig { return &sluicev1.DesiredConfig{} })
	statuses := store.New(env.Buckets.Status, func() *sluicev1.NodeStatus { return &sluicev1.NodeStatus{} })
	const node = "n2"
	a, err := agent.New(agent.Config{
		Conn: env.Conn, Settings: env.Settings, Node: node, StateDir: t.TempDir(),
		Applier: agent.Appliers{{Name: "netlink", Applier: netl}, {Name: "frr", Applier: fa}},
		Checks: []agent.CheckSpec{
			{Check: frr.BGP{FRR: n2.Instance, MinPrefixes: 1}, Timeout: 15 * time.Second},
			route(filtered), route(kept),
		},
		CheckDeadline: time.Minute, ApplierTimeout: 30 * time.Second,
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
	wait := func(d *sluicev1.DesiredConfig, phase sluicev1.NodePhase) *sluicev1.NodeStatus {
		t.Helper()
		var st *sluicev1.NodeStatus
		natstest.Eventually(t, 2*time.Minute, "status of "+d.GetRevision(), func() bool {
			e, err := statuses.Get(context.Background(), node)
			st = e.Value
			return err == nil && st.GetFingerprint() == d.GetFingerprint() && st.GetPhase() == phase
		})
		return st
	}
	owned := func() hostnet.Desired {
		t.Helper()
		o, err := netl.Owned()
		if err != nil {
			t.Fatal(err)
		}
		return o
	}

	good := desiredOf(node, "good", layer2(100), vrfRoute("leak", "t", 10, "", items(filtered, kept), nil))
	start := time.Now()
	write(good)
	wait(good, sluicev1.NodePhase_NODE_PHASE_PROVISIONED)
	t.Logf("1. applied and checked (BGP, both routes) %s after the write; %d reload", time.Since(start).Round(time.Millisecond), fa.Reloads())
	if fa.Reloads() != 1 {
		t.Errorf("reloads after the first apply: %d, want 1", fa.Reloads())
	}
	goodLinks := owned()
	if len(goodLinks.Links) == 0 {
		t.Fatal("netlink made no links for the layer2 network")
	}
	file, err := fa.File(good.GetConfig())
	if err != nil {
		t.Fatal(err)
	}
	if d, err := n2.Diff(ctxT(t, 10*time.Second), confFileRaw(t, file)); err != nil || !d.Empty() {
		t.Errorf("after the apply, frr-reload --test of the applied file: %v, %v; want no change", d, err)
	}

	t.Run("the same config again reloads nothing", func(t *testing.T) {
		start := time.Now()
		for range 3 {
			if err := fa.Validate(ctxT(t, 5*time.Second), good); err != nil {
				t.Fatal(err)
			}
			if err := fa.Apply(ctxT(t, 5*time.Second), good); err != nil {
				t.Fatal(err)
			}
		}
		if fa.Reloads() != 1 {
			t.Errorf("reloads after the same config 3 more times: %d, want 1", fa.Reloads())
		}
		t.Logf("validate+apply of the same config: %s each", (time.Since(start) / 3).Round(time.Microsecond))
	})

	t.Run("a route map filtering a checked prefix fails the check and restores last-good", func(t *testing.T) {
		bad := desiredOf(node, "filter", layer2(200), vrfRoute("leak", "t", 10, "", items(kept), nil))
		write(bad)
		st := wait(bad, sluicev1.NodePhase_NODE_PHASE_INVALID)
		t.Logf("2. Invalid: check %q, message %q\noutput:\n%s", st.GetFailedCheck(), st.GetMessage(), st.GetCheckOutput())
		if want := "route: " + filtered; st.GetFailedCheck() != want {
			t.Errorf("failed check %q, want %q", st.GetFailedCheck(), want)
		}
		for _, want := range []string{filtered + " is not in FRR's routing table of vrf default", filtered + " is not in the kernel's main table"} {
			if !strings.Contains(st.GetCheckOutput(), want) {
				t.Errorf("output lacks %q", want)
			}
		}
		if want := "restored last-good " + good.GetFingerprint()[:12] + " (checks pass)"; !strings.Contains(st.GetMessage(), want) {
			t.Errorf("message lacks %q", want)
		}
		if st.GetAppliedFingerprint() != good.GetFingerprint() {
			t.Errorf("applied fingerprint %s, want last-good's %s", st.GetAppliedFingerprint(), good.GetFingerprint())
		}
		if fa.Reloads() != 3 {
			t.Errorf("reloads: %d, want 3 (good, the filter, good again)", fa.Reloads())
		}
		// The prefix is back in FRR and in n2's kernel, the links are last-good's.
		if out, err, _ := runCheck(t, ns2, route(filtered).Check.(inNamespace).Check, 5*time.Second); err != nil {
			t.Errorf("route %s after the restore: %v\n%s", filtered, err, out)
		}
		if got := owned(); fmt.Sprint(got.Links) != fmt.Sprint(goodLinks.Links) {
			t.Errorf("links after the restore:\n%v\nwant last-good's:\n%v", got.Links, goodLinks.Links)
		}
	})

	t.Run("a config FRR cannot take is Invalid naming the route, nothing applied", func(t *testing.T) {
		// In one route map of the flat layout, entries are numbered 10,
		// 20, …: the 6554th would be 65540, past FRR's 65535, which
		// Render refuses before FRR's parser would.
		intents := []*sluicev1.Intent{layer2(300)}
		for i := 1; i <= 6554; i++ {
			intents = append(intents, vrfRoute(fmt.Sprintf("r%d", i), "t", uint32(i), "", items(fmt.Sprintf("10.%d.%d.0/24", i/256, i%256)), nil))
		}
		refused := desiredOf(node, "refused", intents...)
		reloads := fa.Reloads()
		write(refused)
		st := wait(refused, sluicev1.NodePhase_NODE_PHASE_INVALID)
		t.Logf("3. Invalid: check %q, message %q\noutput:\n%s", st.GetFailedCheck(), st.GetMessage(), st.GetCheckOutput())
		if st.GetFailedCheck() != "validate" {
			t.Errorf("failed check %q, want validate", st.GetFailedCheck())
		}
		for _, want := range []string{"frr applier", "VRF route r6554 (VRF t, sequence 6554): spec.import's IPv4 items would be entry 65540 of route map sluice_import_v4, past FRR's largest entry 65535"} {
			if !strings.Contains(st.GetCheckOutput(), want) {
				t.Errorf("output lacks %q", want)
			}
		}
		if !strings.Contains(st.GetMessage(), "not applied") {
			t.Errorf("message %q does not say nothing was applied", st.GetMessage())
		}
		if fa.Reloads() != reloads {
			t.Errorf("reloads: %d, want %d (none for a refused config)", fa.Reloads(), reloads)
		}
		if got := owned(); fmt.Sprint(got.Links) != fmt.Sprint(goodLinks.Links) {
			t.Errorf("links after a refused config:\n%v\nwant last-good's, untouched:\n%v", got.Links, goodLinks.Links)
		}
		if st.GetAppliedFingerprint() != good.GetFingerprint() {
			t.Errorf("applied fingerprint %s, want last-good's %s", st.GetAppliedFingerprint(), good.GetFingerprint())
		}
		if st.GetNodeFault() != "" {
			t.Errorf("node fault %q; want none: the config is what FRR cannot take", st.GetNodeFault())
		}
	})

	t.Run("with FRR stopped a config is Invalid as the node's fault, nothing applied", func(t *testing.T) {
		for _, d := range frrtest.DefaultDaemons {
			if err := n2.StopDaemon(d); err != nil {
				t.Fatal(err)
			}
		}
		next := desiredOf(node, "next", layer2(400), vrfRoute("leak", "t", 10, "", items(filtered, kept), nil))
		reloads := fa.Reloads()
		write(next)
		st := wait(next, sluicev1.NodePhase_NODE_PHASE_INVALID)
		t.Logf("4. Invalid: check %q, node fault %q, message %q", st.GetFailedCheck(), st.GetNodeFault(), st.GetMessage())
		if st.GetFailedCheck() != "validate" || !strings.Contains(st.GetNodeFault(), "FRR is not running") {
			t.Errorf("check %q, node fault %q; want validate, a node fault saying FRR is not running", st.GetFailedCheck(), st.GetNodeFault())
		}
		if st.GetLastInvalid().GetNodeFault() != st.GetNodeFault() {
			t.Errorf("carried report's node fault %q, want the status's", st.GetLastInvalid().GetNodeFault())
		}
		if fa.Reloads() != reloads {
			t.Errorf("reloads: %d, want %d (nothing applied)", fa.Reloads(), reloads)
		}
		if got := owned(); fmt.Sprint(got.Links) != fmt.Sprint(goodLinks.Links) {
			t.Errorf("links with FRR stopped:\n%v\nwant last-good's, untouched (netlink applies after FRR answers):\n%v", got.Links, goodLinks.Links)
		}
		if st.GetAppliedFingerprint() != good.GetFingerprint() {
			t.Errorf("applied fingerprint %s, want last-good's %s", st.GetAppliedFingerprint(), good.GetFingerprint())
		}
	})
}

// confFileRaw writes body to a temporary file as it is.
func confFileRaw(t testing.TB, body string) string {
	t.Helper()
	p := t.TempDir() + "/frr.conf"
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
