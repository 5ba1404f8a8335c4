package configurator

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/registry"
	"github.com/sluicehq/sluice/pkg/render"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// TestOutcomes_PerDocument: what a sync tells each document it read.
func TestOutcomes_PerDocument(t *testing.T) {
	spec := &sluicev1.RegistrySpec{Name: "kube"}
	noVRF := &sluicev1.Intent{Name: "novrf", Spec: &sluicev1.Intent_Layer2Network{Layer2Network: &sluicev1.Layer2Network{
		Vlan: 120, Vni: 10120, AnycastGateways: []string{"10.0.0.1/24"}}}}
	snap := docs(
		doc("Layer2Network/net/a", l2("a", 100)),
		doc("Layer2Network/net/novrf", noVRF),
		doc("Layer2Network/net/shared", l2("shared", 130)),
		registry.Document{Origin: "Layer2Network/net/broken", Err: fmt.Errorf("spec.vlan: is not a number")},
		registry.Document{Origin: "Layer2NetworkConfiguration/mac", Intents: []*sluicev1.Intent{l2("mac", 140)},
			Err: fmt.Errorf("spec.anycastMac: %w", registry.ErrUnmapped)},
	)
	live := stored(owned("api", "", l2("shared", 130)))
	plan := planSync(spec, snap, live, nil, nil, settling{})
	// In force: a as declared, mac with another VLAN (an undo went back to
	// a revision holding an earlier version of it).
	head := registry.Revision{ID: "h", Generation: 3}
	inForce := registry.Revision{ID: "f", Generation: 2, Intents: []*sluicev1.Intent{l2("a", 100), l2("mac", 141)}}
	got := outcomes(snap, plan, head, inForce)
	want := map[string]struct {
		refused, note string
		holds         bool
	}{
		"Layer2Network/net/a":            {holds: true},
		"Layer2Network/net/novrf":        {refused: "layer2network/novrf: spec.vrf: is required when anycastGateways are set"},
		"Layer2Network/net/shared":       {refused: "layer2network/shared is owned by api"},
		"Layer2Network/net/broken":       {refused: "spec.vlan: is not a number"},
		"Layer2NetworkConfiguration/mac": {note: "spec.anycastMac"},
	}
	if len(got) != len(want) {
		t.Fatalf("%d outcomes, want %d: %+v", len(got), len(want), got)
	}
	for _, o := range got {
		w := want[o.Origin]
		if (w.refused == "") != (o.Refused == "") || !strings.Contains(o.Refused, w.refused) {
			t.Errorf("%s: refused %q, want one containing %q", o.Origin, o.Refused, w.refused)
		}
		if (w.note == "") != (o.Note == "") || !strings.Contains(o.Note, w.note) {
			t.Errorf("%s: note %q, want one containing %q", o.Origin, o.Note, w.note)
		}
		if o.Head.ID != head.ID || o.Head.Generation != head.Generation || o.InForce.ID != inForce.ID || o.InForce.Generation != inForce.Generation {
			t.Errorf("%s: head %v in force %v", o.Origin, o.Head, o.InForce)
		}
		if o.InForceHolds != w.holds {
			t.Errorf("%s: the revision in force holds it: %v, want %v", o.Origin, o.InForceHolds, w.holds)
		}
	}
}

// TestRevisions_InForceWithItsIntents: the write-back reads the revision
// in force with its intents, so that an outcome can say whether that
// revision holds the document (after an undo it may not), not only that
// its generation is later.
func TestRevisions_InForceWithItsIntents(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	ctx := context.Background()
	s := &Service{st: &state{
		revisions: store.New(env.Buckets.Revisions, func() *sluicev1.Revision { return &sluicev1.Revision{} }),
		head:      store.New(env.Buckets.Revisions, func() *sluicev1.Head { return &sluicev1.Head{} }),
		refs:      store.New(env.Buckets.Rollouts, func() *sluicev1.RolloutRef { return &sluicev1.RolloutRef{} }),
	}}
	in := []*sluicev1.Intent{l2("a", 100)}
	id := render.RevisionID(in)
	if _, err := s.st.revisions.Create(ctx, id, &sluicev1.Revision{Id: id, Intents: in}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.st.head.Create(ctx, contract.KeyHead, &sluicev1.Head{Revision: id, Generation: 4}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.revisions(ctx); err != nil {
		t.Fatalf("no rollout finished yet: %v", err)
	}
	if _, err := s.st.refs.Create(ctx, contract.KeyLastApplied, &sluicev1.RolloutRef{Rollout: "r4", Revision: id, Generation: 4}); err != nil {
		t.Fatal(err)
	}
	head, inForce, err := s.revisions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if head.ID != id || head.Generation != 4 || inForce.ID != id || inForce.Generation != 4 {
		t.Errorf("head %v, in force %v; want %s at generation 4 both", head, inForce, id)
	}
	if len(inForce.Intents) != 1 || !proto.Equal(inForce.Intents[0], in[0]) {
		t.Errorf("the revision in force's intents %v, want %v", inForce.Intents, in)
	}
}
