package configurator_test

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"testing"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/apiclient"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/render"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

func l2net(name string, vlan uint32, vrf string) *sluicev1.Intent {
	n := &sluicev1.Layer2Network{Vlan: vlan, Vni: vlan, Vrf: vrf}
	if vrf != "" {
		n.AnycastGateways = []string{"10.9.0.1/24"}
	}
	return &sluicev1.Intent{Name: name, Spec: &sluicev1.Intent_Layer2Network{Layer2Network: n}}
}

// outcome is what an apply answered, in the terms a dry run must match.
type outcome struct {
	Code, Description           string
	FieldErrors                 []string
	Revision                    string
	Changed                     bool
	Created, Updated, Unchanged []string
}

func outcomeOf(resp *sluicev1.ApplyResponse, err error) outcome {
	var o outcome
	var apiErr *apiclient.Error
	switch {
	case errors.As(err, &apiErr):
		o.Code, o.Description = string(apiErr.Code), apiErr.Description
		for _, fe := range apiErr.FieldErrors {
			o.FieldErrors = append(o.FieldErrors, fe.GetIntent()+" "+fe.GetField()+": "+fe.GetRule())
		}
	case err != nil:
		o.Code = "error: " + err.Error()
	default:
		o.Revision, o.Changed = resp.GetRevision(), resp.GetChanged()
		o.Created, o.Updated, o.Unchanged = resp.GetCreated(), resp.GetUpdated(), resp.GetUnchanged()
	}
	return o
}

// TestApply_DryRunAnswersWhatTheApplyThenDoes runs each request as a dry
// run, checks that it stored nothing, then runs it for real and requires
// the same answer: created, updated, unchanged, the revision, or the same
// refusal (field errors, registry ownership, marked dependencies, configs
// recorded invalid). The cases build on each other's real applies.
func TestApply_DryRunAnswersWhatTheApplyThenDoes(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	start(t, env)
	ctx := context.Background()
	dir := t.TempDir()
	writeNet(t, dir, "red", 100)
	addRegistry(t, env, dirSpec("gitops", dir))
	natstest.Eventually(t, wait, "registry gitops synced (red in the head)", func() bool {
		return registryStatus(t, env, "gitops").GetState() == sluicev1.RegistryState_REGISTRY_STATE_SYNCED
	})

	// A present node and, for the known-bad case, a fingerprint recorded
	// invalid: what that node would get from the head's set plus "doomed".
	labels := map[string]string{"zone": "z1"}
	if _, err := store.New(env.Buckets.Nodes, func() *sluicev1.NodePresence { return &sluicev1.NodePresence{} }).
		Create(ctx, "node-01", &sluicev1.NodePresence{Node: "node-01", Labels: labels}); err != nil {
		t.Fatal(err)
	}
	recordInvalid := func(t *testing.T, extra *sluicev1.Intent) {
		set := append(slices.Clone(getRevision(t, env, headNow(t, env).GetRevision()).GetIntents()), extra)
		render.Sort(set)
		fp := render.Fingerprint(render.NodeConfig(&sluicev1.Revision{Id: render.RevisionID(set), Intents: set}, labels))
		if _, err := store.New(env.Buckets.Fingerprints, func() *sluicev1.InvalidFingerprint { return &sluicev1.InvalidFingerprint{} }).
			Create(ctx, fp, &sluicev1.InvalidFingerprint{Fingerprint: fp, Node: "node-01", Check: "mgmt", Output: "unreachable"}); err != nil {
			t.Fatal(err)
		}
	}

	cases := []struct {
		name    string
		setup   func(t *testing.T)
		intents []*sluicev1.Intent
		refused bool
	}{
		{name: "created", intents: []*sluicev1.Intent{l2net("a", 200, "")}},
		{name: "the same again changes nothing", intents: []*sluicev1.Intent{l2net("a", 200, "")}},
		{name: "updated and created", intents: []*sluicev1.Intent{l2net("a", 201, ""), l2net("b", 202, "tenant-b")}},
		{name: "an invalid batch", intents: []*sluicev1.Intent{l2net("c", 5000, "")}, refused: true},
		{name: "invalid together with the stored intents", intents: []*sluicev1.Intent{l2net("c", 201, "")}, refused: true},
		{name: "an intent a registry owns", intents: []*sluicev1.Intent{l2net("red", 150, "")}, refused: true},
		{name: "a route into a VRF whose network is marked for deletion",
			setup: func(t *testing.T) {
				if _, err := del(t, env.Conn, "Layer2Network", "b"); err != nil {
					t.Fatal(err)
				}
			},
			intents: []*sluicev1.Intent{{Name: "leak", Spec: &sluicev1.Intent_VrfRoute{VrfRoute: &sluicev1.VRFRoute{Vrf: "tenant-b", Sequence: 1}}}},
			refused: true},
		{name: "a config recorded invalid", setup: func(t *testing.T) { recordInvalid(t, l2net("doomed", 300, "")) },
			intents: []*sluicev1.Intent{l2net("doomed", 300, "")}, refused: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.setup != nil {
				c.setup(t)
			}
			before := takeSnapshot(t, env)
			dry := outcomeOf(apply(t, env.Conn, &sluicev1.ApplyRequest{Intents: c.intents, DryRun: true}))
			if after := takeSnapshot(t, env); !reflect.DeepEqual(before, after) {
				t.Fatalf("the dry run stored something: before %v, after %v", before, after)
			}
			real := outcomeOf(apply(t, env.Conn, &sluicev1.ApplyRequest{Intents: c.intents}))
			if !reflect.DeepEqual(dry, real) {
				t.Fatalf("the dry run answered\n  %+v\nthe apply\n  %+v", dry, real)
			}
			if refused := real.Code != ""; refused != c.refused {
				t.Fatalf("refused %v (%+v), want %v", refused, real, c.refused)
			}
		})
	}
}
