package configurator_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/apiclient"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/pkg/verify"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/configurator"
)

// presentNodes registers n nodes per zone, as their agents would.
func presentNodes(t *testing.T, env *natstest.Env, n int, zones ...string) {
	t.Helper()
	nodes := store.New(env.Buckets.Nodes, func() *sluicev1.NodePresence { return &sluicev1.NodePresence{} })
	for _, z := range zones {
		for i := range n {
			name := fmt.Sprintf("%s-%02d", z, i)
			if _, err := nodes.Create(context.Background(), name, &sluicev1.NodePresence{Node: name, Labels: map[string]string{"zone": z}}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func vrfRoute(name, vrf string) *sluicev1.Intent {
	return &sluicev1.Intent{Name: name, Spec: &sluicev1.Intent_VrfRoute{VrfRoute: &sluicev1.VRFRoute{Vrf: vrf, Sequence: 30,
		Export: []*sluicev1.PrefixItem{{Cidr: "10.77.0.0/16"}}}}}
}

// rules are the rule ids of fs.
func rules(fs []*sluicev1.Finding) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.GetRule())
	}
	return out
}

// The fleet verifier runs before a revision is cut: an error refuses the
// apply (and its dry run) with the finding, nothing stored; the same VNI
// with another VLAN on a zone of its own passes every per-node rule.
func TestApply_FleetVerifierErrorRefusesBeforeAnythingIsStored(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	start(t, env)
	presentNodes(t, env, 2, "zone-a", "zone-b", "zone-c")
	mustApply(t, env.Conn, &sluicev1.ApplyRequest{Intents: examples(t)})

	// tenant-a is VLAN 100, VNI 10100 in zone-a.
	other := &sluicev1.Intent{Name: "tenant-a-c", Spec: &sluicev1.Intent_Layer2Network{Layer2Network: &sluicev1.Layer2Network{
		Vlan: 101, Vni: 10100, Mtu: 9000, Vrf: "tenant-a", AnycastGateways: []string{"10.0.100.1/24", "fd00:100::1/64"},
		NodeSelector: &sluicev1.NodeSelector{MatchLabels: map[string]string{"zone": "zone-c"}}}}}
	failFD := &sluicev1.Strategy{FailureDomain: "zonee"}
	for _, tt := range []struct {
		name     string
		intents  []*sluicev1.Intent
		strategy *sluicev1.Strategy
		rule     string
	}{
		{"one VNI, two VLANs", []*sluicev1.Intent{other}, nil, verify.RuleVNIVLAN},
		{"a failure domain no node carries", []*sluicev1.Intent{vrfRoute("extra", "tenant-a")}, failFD, verify.RuleDomainMissing},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := takeSnapshot(t, env)
			for _, dry := range []bool{true, false} {
				_, err := apply(t, env.Conn, &sluicev1.ApplyRequest{Intents: tt.intents, Strategy: tt.strategy, DryRun: dry})
				var ae *apiclient.Error
				if !errors.As(err, &ae) || ae.Code != contract.ErrCodeInvalid {
					t.Fatalf("dry run %v: err = %v, want a refusal (%s)", dry, err, contract.ErrCodeInvalid)
				}
				if got := rules(ae.Findings); len(got) != 1 || got[0] != tt.rule {
					t.Fatalf("dry run %v: findings %v, want [%s]: %v", dry, got, tt.rule, err)
				}
				if f := ae.Findings[0]; f.GetSeverity() != sluicev1.Severity_SEVERITY_ERROR || f.GetNodeCount() == 0 || len(f.GetNodes()) == 0 {
					t.Errorf("finding %v: want an error naming example nodes", f)
				}
				if !strings.Contains(ae.Description, "refused by the fleet verifier: 1 error") || !strings.Contains(ae.Description, "nothing was stored") {
					t.Errorf("description %q", ae.Description)
				}
			}
			if after := takeSnapshot(t, env); !maps.Equal(before.intents, after.intents) || !maps.Equal(before.revisions, after.revisions) {
				t.Fatal("a refused apply stored something")
			}
		})
	}
}

// A warning is answered with the apply it did not stop; strict (the
// request's, or the configurator's setting) makes it refuse.
func TestApply_FleetVerifierWarningIsAnsweredAndRefusesWhenStrict(t *testing.T) {
	typo := []*sluicev1.Intent{vrfRoute("typo", "tenant-aa")} // tenant-a is named by two intents
	for _, tt := range []struct {
		name          string
		strictRequest bool
		strictConfig  bool
	}{
		{name: "not strict"}, {name: "strict request", strictRequest: true}, {name: "strict configurator", strictConfig: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			env := natstest.Start(t, contract.DefaultSettings())
			start(t, env, func(c *configurator.Config) { c.StrictVerify = tt.strictConfig })
			presentNodes(t, env, 1, "zone-a", "zone-b")
			mustApply(t, env.Conn, &sluicev1.ApplyRequest{Intents: examples(t)})
			before := headNow(t, env)
			resp, err := apply(t, env.Conn, &sluicev1.ApplyRequest{Intents: typo, Strict: tt.strictRequest})
			if !tt.strictRequest && !tt.strictConfig {
				if err != nil {
					t.Fatalf("apply: %v", err)
				}
				if got := rules(resp.GetFindings()); len(got) != 1 || got[0] != verify.RuleVRFUnknown || !resp.GetChanged() {
					t.Fatalf("changed %v, findings %v: want the apply done and the vrf-unknown warning", resp.GetChanged(), got)
				}
				if msg := resp.GetFindings()[0].GetMessage(); !strings.Contains(msg, `did you mean "tenant-a"?`) {
					t.Errorf("message %q does not name the nearest VRF", msg)
				}
				return
			}
			var ae *apiclient.Error
			if !errors.As(err, &ae) || rules(ae.Findings)[0] != verify.RuleVRFUnknown || !strings.Contains(ae.Description, "strict: warnings refuse too") {
				t.Fatalf("err = %v, want a refusal by the vrf-unknown warning", err)
			}
			if headNow(t, env).GetRevision() != before.GetRevision() {
				t.Fatal("the head moved")
			}
		})
	}
}

// A delete is verified as an apply: the set it leaves, on the present nodes
// and with its strategy.
func TestDelete_FleetVerifierErrorRefusesIt(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	start(t, env)
	presentNodes(t, env, 1, "zone-a", "zone-b")
	mustApply(t, env.Conn, &sluicev1.ApplyRequest{Intents: examples(t)})
	before := takeSnapshot(t, env)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	_, err := apiclient.Delete(ctx, env.Conn, &sluicev1.DeleteRequest{Kind: "Layer2Network", Name: "storage", Strategy: &sluicev1.Strategy{FailureDomain: "zonee"}})
	var ae *apiclient.Error
	if !errors.As(err, &ae) || len(ae.Findings) != 1 || ae.Findings[0].GetRule() != verify.RuleDomainMissing ||
		!strings.Contains(ae.Description, "in the set the delete leaves") {
		t.Fatalf("err = %v, want a refusal by failure-domain-missing", err)
	}
	if after := takeSnapshot(t, env); !maps.Equal(before.intents, after.intents) || !maps.Equal(before.revisions, after.revisions) {
		t.Fatal("a refused delete stored something")
	}
}

// Content that is the head, applied again while the head's rollout waits
// behind another, changes nothing and answers which rollout it waits for.
func TestApply_UnchangedWhileQueued_AnswersWhatItWaitsFor(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	start(t, env) // no coordinator: the head's rollout never starts
	mustApply(t, env.Conn, &sluicev1.ApplyRequest{Intents: examples(t)})
	rev := strings.Repeat("0123456789abcdef", 4)
	running := contract.RolloutID(7, rev)
	if _, err := store.New(env.Buckets.Rollouts, func() *sluicev1.RolloutRef { return &sluicev1.RolloutRef{} }).
		Create(context.Background(), contract.KeyActive, &sluicev1.RolloutRef{Rollout: running, Revision: rev, Generation: 7, At: timestamppb.Now()}); err != nil {
		t.Fatal(err)
	}
	resp := mustApply(t, env.Conn, &sluicev1.ApplyRequest{Intents: examples(t), Strategy: &sluicev1.Strategy{MaxParallel: "3"}})
	if resp.GetChanged() || resp.GetWaitsFor() != running {
		t.Fatalf("changed %v, waitsFor %q: want no change, waiting for %s", resp.GetChanged(), resp.GetWaitsFor(), running)
	}
}

// A registry sync keeps the set as valid as it is by the fleet rules too:
// an upsert that gives a stored network's VNI another VLAN in a zone of its
// own is left out and reported, the rest goes ahead.
func TestDirectoryRegistry_FleetErrorLeavesTheUpsertOut(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	start(t, env)
	dir := t.TempDir()
	write := func(name, spec string) {
		t.Helper()
		doc := fmt.Sprintf("kind: Layer2Network\nname: %s\nspec: %s\n", name, spec)
		if err := os.WriteFile(filepath.Join(dir, name+".yaml"), []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("red", "{vlan: 100, vni: 5000, nodeSelector: {matchLabels: {zone: z1}}}")
	addRegistry(t, env, dirSpec("gitops", dir))
	waitStored(t, env, "layer2network.red", "red synced", func(v *sluicev1.StoredIntent) bool { return v != nil })
	write("blue", "{vlan: 101, vni: 5000, nodeSelector: {matchLabels: {zone: z2}}}")
	write("green", "{vlan: 102, vni: 5002}")
	waitStored(t, env, "layer2network.green", "green synced beside blue", func(v *sluicev1.StoredIntent) bool { return v != nil })
	var got []string
	natstest.Eventually(t, wait, "the status to report blue's VNI", func() bool {
		got = got[:0]
		for _, fe := range registryStatus(t, env, "gitops").GetInvalid() {
			got = append(got, fe.GetIntent()+" "+fe.GetField())
		}
		return slices.Equal(got, []string{"layer2network/blue fleet: " + verify.RuleVNIVLAN})
	})
	if _, err := intentsStore(env).Get(context.Background(), "layer2network.blue"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("blue is stored (%v): it breaks vni-vlan-mismatch with red", err)
	}
}

// An undo and a retry check their strategy on the present nodes: a
// failure-domain key no node carries is refused, and nothing moves.
func TestUndoRetry_FleetVerifierRefusesTheirStrategy(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	start(t, env)
	presentNodes(t, env, 1, "zone-a", "zone-b")
	first := mustApply(t, env.Conn, &sluicev1.ApplyRequest{Intents: examples(t)}).GetRevision()
	mustApply(t, env.Conn, &sluicev1.ApplyRequest{Intents: []*sluicev1.Intent{vrfRoute("extra", "tenant-a")}})
	before := takeSnapshot(t, env)
	zonee := &sluicev1.Strategy{FailureDomain: "zonee"}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	_, errUndo := apiclient.Undo(ctx, env.Conn, &sluicev1.UndoRequest{ToRevision: first, Strategy: zonee})
	_, errRetry := apiclient.Retry(ctx, env.Conn, &sluicev1.RetryRequest{Strategy: zonee})
	for what, err := range map[string]error{"undo": errUndo, "retry": errRetry} {
		var ae *apiclient.Error
		if !errors.As(err, &ae) || len(ae.Findings) != 1 || ae.Findings[0].GetRule() != verify.RuleDomainMissing ||
			!strings.Contains(ae.Description, "in the "+what+"'s strategy") {
			t.Errorf("%s: err = %v, want a refusal by failure-domain-missing", what, err)
		}
	}
	if after := takeSnapshot(t, env); !maps.Equal(before.intents, after.intents) || !maps.Equal(before.revisions, after.revisions) {
		t.Fatal("a refused undo or retry stored something")
	}
}
